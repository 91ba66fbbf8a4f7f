#!/usr/bin/env bash
# supervise.sh OLD NEW [BATCHES] [SECONDS] [ROUNDS]: what the controller
# itself spends while its batches run. BATCHES one-item tasks (default 2)
# each run `sleep SECONDS` (default 30), all at once, under the controller
# binaries OLD and NEW alternately, ROUNDS times each (default 3). Prints
# each run's controller CPU time (utime + stime of /proc/PID/stat, its own
# threads only, the last sample before it exits; the sleeps cost nothing)
# and its share of a core, then the means. Long batches make the
# supervision (samples, probes, the wake-ups they take) the whole of it;
# start-up is the same in both builds. Compare the means, not a run.
# Environment: CONTROLLER_FLAGS.
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2 && exit 2; }
old=$1 new=$2 batches=${3:-2} seconds=${4:-30} rounds=${5:-3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/settle.sh
. "$ROOT/bench/settle.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tick=$(getconf CLK_TCK)

# run BIN LABEL: one run; prints "LABEL WALL CPU".
run() {
	local dir=$work/$RANDOM$RANDOM pid last="" s e i
	mkdir -p "$dir/spool" && chmod 700 "$dir/spool"
	for ((i = 0; i < batches; i++)); do
		cat >"$dir/spool/s-$i.yaml" <<EOF
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  name: s-$i
spec:
  class: custom
  command: ["sleep", "$seconds"]
  items: {count: 1}
  resources:
    fixed: {memory: 16Mi}
    threads: 1
EOF
	done
	settle_cpu
	s=$(date +%s.%N)
	# shellcheck disable=SC2086
	"$1" run --spool "$dir/spool" --exit-when-done --max-parallel "$batches" --history "$dir/history.db" ${CONTROLLER_FLAGS:-} >/dev/null 2>"$dir/log" &
	pid=$!
	while st=$(cat /proc/$pid/stat 2>/dev/null); do last=$st; sleep 0.2; done
	wait "$pid" || { echo "supervise.sh: $1 failed (log: $dir/log)" >&2 && trap - EXIT && return 1; }
	e=$(date +%s.%N)
	awk -v l="$2" -v s="$s" -v e="$e" -v t="$tick" -v st="$last" \
		'BEGIN { split(st, f, " "); printf "%s %.2f %.3f\n", l, e - s, (f[14] + f[15]) / t }'
}

for _ in $(seq "$rounds"); do
	run "$old" old
	run "$new" new
done | tee "$work/runs" | awk '{ printf "%-4s wall %6.2f s  controller CPU %6.3f s (%.2f %% of a core)\n", $1, $2, $3, 100 * $3 / $2 }'
awk '{ w[$1] += $2; c[$1] += $3; k[$1]++ }
	END { for (l in w) printf "%-4s mean: controller CPU %.3f s over %.2f s, %.2f %% of a core (%d runs)\n", l, c[l] / k[l], w[l] / k[l], 100 * c[l] / w[l], k[l] }' "$work/runs" | sort
