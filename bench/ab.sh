#!/usr/bin/env bash
# ab.sh OLD NEW [ROUNDS] [N]: N trivial tasks (true, default 2000), two at a
# time, run by the controller binaries OLD and NEW alternately, ROUNDS times
# each (default 4). Prints each run's wall time and the controller's own CPU
# time (utime + stime of /proc/PID/stat, the last sample before it exits),
# then the means. Alternating in one session is what makes two builds
# comparable on a shared, noisy machine: compare the means, not a run.
# The spools are removed at the end only: on ext4 without a journal, files
# deleted in the last minutes slow every file creation.
# The log goes to a file, as in bench/run.sh (JSON lines: not a terminal),
# and each run learns into a history of its own, never the machine's.
# Each run starts once the CPU pressure the last one left has settled
# (bench/settle.sh).
# With AB_SLEEP=S, the N tasks (default 2) each run `sleep S` instead,
# all at once (--max-parallel N): what the controller itself spends
# supervising long batches (samples, probes), its share of a core printed
# beside; give it the same binary twice to see the spread between runs.
# With AB_PAIR=1 too, the two builds run at the same time, each with its
# own sleepers (--share --memory-capacity 1Gi): the machine's drift then
# falls on both alike, where runs in turn differ by 10 % from one to the
# next on this machine.
# Environment: BENCHKIT (default bin/benchkit), CONTROLLER_FLAGS, AB_SLEEP,
# AB_PAIR.
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2 && exit 2; }
old=$1 new=$2 rounds=${3:-4} n=${4:-2000}
[ -n "${AB_SLEEP:-}" ] && [ -z "${4:-}" ] && n=2 # sleepers: two by default
pair=${AB_PAIR:-}
if [ -n "$pair" ]; then
	[ -n "${AB_SLEEP:-}" ] || { echo "ab.sh: AB_PAIR wants AB_SLEEP (trivial tasks of two builds at once compete for the CPU)" >&2 && exit 2; }
	CONTROLLER_FLAGS="${CONTROLLER_FLAGS:-} --share --memory-capacity 1Gi"
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/settle.sh
. "$ROOT/bench/settle.sh"
BK=${BENCHKIT:-$ROOT/bin/benchkit}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tick=$(getconf CLK_TCK)

# sleepers SPOOL: the N tasks of AB_SLEEP.
sleepers() {
	local i
	for ((i = 0; i < n; i++)); do
		cat >"$1/s-$i.yaml" <<EOF
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  name: s-$i
spec:
  class: custom
  command: ["sleep", "$AB_SLEEP"]
  items: {count: 1}
  resources:
    fixed: {memory: 16Mi}
    threads: 1
EOF
	done
}

# run BIN LABEL: one run; prints "LABEL WALL CPU".
run() {
	local spool=$work/$2-$RANDOM$RANDOM/spool pid last="" s e parallel=2
	mkdir -p "$spool" && chmod 700 "$spool"
	if [ -n "${AB_SLEEP:-}" ]; then
		sleepers "$spool"
		parallel=$n
	else
		"$BK" spool-gen --kind trivial --n "$n" --dir "$spool" >/dev/null
	fi
	settle_cpu
	s=$(date +%s.%N)
	# shellcheck disable=SC2086
	"$1" run --spool "$spool" --exit-when-done --max-parallel "$parallel" --history "$spool.history.db" ${CONTROLLER_FLAGS:-} >/dev/null 2>"$spool.log" &
	pid=$!
	while st=$(cat /proc/$pid/stat 2>/dev/null); do last=$st; sleep 0.02; done
	wait "$pid" || { echo "ab.sh: $1 failed" >&2 && return 1; }
	e=$(date +%s.%N)
	awk -v l="$2" -v s="$s" -v e="$e" -v t="$tick" -v st="$last" \
		'BEGIN { split(st, f, " "); printf "%s %.2f %.3f\n", l, e - s, (f[14] + f[15]) / t }'
}

for _ in $(seq "$rounds"); do
	if [ -n "$pair" ]; then
		run "$old" old &
		a=$!
		run "$new" new &
		wait "$a" # a failed run ends the script, as in turn
		wait $!
		continue
	fi
	run "$old" old
	run "$new" new
done | tee "$work/runs" | awk '{ printf "%-4s wall %6.2f s  controller CPU %6.3f s (%.2f %% of a core)\n", $1, $2, $3, 100 * $3 / $2 }'
awk '{ w[$1] += $2; c[$1] += $3; k[$1]++ }
	END { for (l in w) printf "%-4s mean wall %.2f s, controller CPU %.3f s, %.2f %% of a core (%d runs)\n", l, w[l] / k[l], c[l] / k[l], 100 * c[l] / w[l], k[l] }' "$work/runs" | sort
