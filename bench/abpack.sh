#!/usr/bin/env bash
# abpack.sh OLD NEW [WORKLOAD] [OUT]: a packing workload of bench/run.sh (A
# to E, default B) through the controller binaries OLD and NEW in the same
# 8 GiB memory cgroup, in the order OLD, NEW, NEW, OLD: this machine's speed
# drifts within a run, and the order cancels a steady drift. Each binary
# learns into a history of its own that its second run starts from, as a
# user running the workload again. Prints benchkit's table (makespan,
# items, OOM kills, peak, CPU) and, for each run, the batches' reserved and
# peak memory over time (GiB-s, from `lardon3d-controller batches`) and how
# many batches used less than 90 % of what they reserved. OUT (default
# bench/out/abpack) is replaced when it is an earlier run's or empty.
# Needs root (the envelope cgroup).
# Environment: SYNTH (default bin/lardon3d-synth).
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2 && exit 2; }
old=$(realpath "$1") new=$(realpath "$2") w=${3:-B}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${4:-$ROOT/bench/out/abpack}
[ "$(id -u)" -eq 0 ] || { echo "abpack.sh: needs root for the memory cgroup" >&2 && exit 1; }
[[ "$w" =~ ^[A-E]$ ]] || { echo "abpack.sh: workload A to E, not $w" >&2 && exit 2; }
SYNTH=${SYNTH:-$ROOT/bin/lardon3d-synth}
# OUT is replaced only when it is empty or an earlier run's (its table).
if [ -d "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && [ ! -e "$OUT/results.jsonl" ]; then
	echo "abpack.sh: $OUT holds files that no earlier run wrote: not replacing it" >&2 && exit 2
fi
rm -rf "$OUT" && mkdir -p "$OUT/logs"
(cd "$ROOT" && go build -o "$OUT/benchkit" ./bench/benchkit)
BK=$OUT/benchkit
BUDGET=$((8192 * 1048576)) NPROC=$(nproc)
CG_STATE=$OUT/cgroup.json
"$BK" cgroup-create --name "lardon3d-abpack-$$" --limit "$BUDGET" --state "$CG_STATE"
trap '"$BK" cgroup-destroy --state "$CG_STATE" || true' EXIT
# shellcheck disable=SC1091
. "$CG_STATE.env"
RESULTS=$OUT/results.jsonl
: >"$RESULTS"
export BENCH_WORK=$OUT/work
mkdir -p "$BENCH_WORK"
dir=$OUT/packing-$w
"$BK" gen --workload "$w" --scale 1 --mem-scale 1 --synth "$SYNTH" --wrapper "$ROOT/bench/part.sh" --dir "$dir" --results "$RESULTS"
# shellcheck disable=SC1091
. "$dir/workload.env"

for run in old-1 new-1 new-2 old-2; do
	bin=$old
	[ "${run%-*}" = new ] && bin=$new
	spool=$dir/spool-$run
	mkdir -p "$spool" && chmod 700 "$spool" && cp "$dir"/manifests/*.yaml "$spool"/
	start=$(date +%s.%N)
	"$BK" measure --state "$CG_STATE" --results "$RESULTS" --case "packing-$w" --items-total "$ITEMS" --timeout 1800s \
		--subject "controller $run" --spool "$spool" -- \
		"$bin" run --spool "$spool" --exit-when-done --history "$dir/history-${run%-*}.db" \
		--memory-capacity "$BUDGET" --max-parallel "$NPROC" 2>"$OUT/logs/$run.log" || true
	# The run's batches (its binary's history holds both its runs: those
	# that started during this one).
	"$bin" batches --history "$dir/history-${run%-*}.db" -o tsv >"$OUT/logs/$run.batches.tsv"
	echo "$run $start $(date +%s.%N)" >>"$OUT/runs.txt"
done
"$BK" report --results "$RESULTS" --envelope "cgroup v$BENCH_CG_VERSION, memory limit 8 GiB (no swap); each run inside it in turn"
while read -r run start end; do
	awk -F'\t' -v run="$run" -v s="$start" -v e="$end" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$col["START"] < s || $col["START"] > e { next }
		{ n++; r += $col["RESERVED"] * $col["ELAPSED"]; p += $col["PEAK"] * $col["ELAPSED"]; if ($col["EFFICIENCY"] < 0.9) low++ }
		END { printf "%s: %d batches, reserved %.0f GiB-s, peak %.0f GiB-s (%.0f %%), %d under 90 %% of their reservation\n",
			run, n, r / 2^30, p / 2^30, r ? 100 * p / r : 0, low }' "$OUT/logs/$run.batches.tsv"
done <"$OUT/runs.txt"
