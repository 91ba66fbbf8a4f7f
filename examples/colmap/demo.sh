#!/bin/sh
# demo.sh: a real COLMAP reconstruction through lardon3d-controller.
#
# Renders a synthetic scene (genviews), drops the pipeline's manifests
# (tasks/*.yaml: features -> matching -> mapper -> align) into a fresh spool,
# runs `lardon3d-controller run --spool DIR --exit-when-done`, then scores the
# model against the ground truth (evaluate). Exits non-zero when the
# controller fails or the reconstruction is below the thresholds
# (>= 90% of the views registered, mean camera-centre error < 5% of the radius).
#
# Usage: examples/colmap/demo.sh [--views N] [--width W] [--height H] [--seed S]
#                                [--work DIR] [--direct]
#   --direct   run the manifests with directrun instead of the controller
#              (sequential, ungoverned; for trying the pipeline alone)
# Environment:
#   CONTROLLER        controller binary (default ./bin/lardon3d-controller,
#                     built from ./cmd/lardon3d-controller when missing)
#   CONTROLLER_FLAGS  extra flags for `run` (e.g. --memory-capacity 2Gi)
set -eu

views=24 width=320 height=240 seed=1 work= direct=0
while [ $# -gt 0 ]; do
	case $1 in
	--views) views=$2; shift 2 ;;
	--width) width=$2; shift 2 ;;
	--height) height=$2; shift 2 ;;
	--seed) seed=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--direct) direct=1; shift ;;
	-h | --help) sed -n '2,20p' "$0"; exit 0 ;;
	*) echo "demo.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ -n "$work" ] || work=$(mktemp -d "${TMPDIR:-/tmp}/colmap-demo.XXXXXX")
mkdir -p "$work"
work=$(cd "$work" && pwd)
now() { date +%s; }
step() { echo "== $*"; }

if ! command -v colmap >/dev/null 2>&1; then
	step "installing colmap"
	sudo=
	[ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq colmap >/dev/null
fi

step "building genviews and evaluate"
mkdir -p "$work/bin"
(cd "$repo" && go build -o "$work/bin/" ./examples/colmap/genviews ./examples/colmap/evaluate ./examples/colmap/directrun)
if [ "$direct" = 0 ]; then
	CONTROLLER=${CONTROLLER:-$repo/bin/lardon3d-controller}
	if [ ! -x "$CONTROLLER" ]; then
		step "building the controller into $CONTROLLER"
		(cd "$repo" && go build -o "$CONTROLLER" ./cmd/lardon3d-controller)
	fi
fi

spool=$work/spool project=$work/project
rm -rf "$spool" "$project"
mkdir -p "$spool"
t0=$(now)
step "rendering $views views at ${width}x$height (seed $seed) into $project"
"$work/bin/genviews" --n "$views" --width "$width" --height "$height" --seed "$seed" --out "$project"
t1=$(now)
# The manifests use workingDir ../project, relative to the spool.
cp "$here"/tasks/*.yaml "$spool/"
if [ "$direct" = 1 ]; then
	step "running the pipeline directly (no controller)"
	"$work/bin/directrun" --spool "$spool"
else
	step "running the pipeline: $CONTROLLER run --spool $spool --exit-when-done ${CONTROLLER_FLAGS:-}"
	# shellcheck disable=SC2086 # CONTROLLER_FLAGS is a list of flags
	"$CONTROLLER" run --spool "$spool" --exit-when-done ${CONTROLLER_FLAGS:-}
fi
t2=$(now)
step "evaluating (render $((t1 - t0))s, pipeline $((t2 - t1))s)"
"$work/bin/evaluate" --model "$project/aligned-txt" --gt "$project/gt.txt" --scene "$project/scene.json"
