#!/usr/bin/env bash
# plain.sh N [ROUNDS]: N trivial tasks two at a time, timed plainly, tsp
# beside the controller, as a person would time them (issue 35): tsp -S 2,
# N × `tsp true` from a shell loop, drained; then the controller (bin/) on
# N `true` manifests (benchkit spool-gen --kind trivial) with
# --exit-when-done --max-parallel 2, its own and its batches' CPU from
# /proc/PID/stat. And `xargs -P 2` on N `true`, which says what a process
# start costs on this machine that day: tsp pays two per job, the
# controller one. With ROUNDS (default 1), each round times the three
# again, tsp and the controller in turn first (tsp first in odd rounds),
# and the end prints each one's median and the ratio of the medians: what
# a process start costs here moves within minutes, and only runs side by
# side compare. Each run starts once the CPU pressure of the one before
# has settled (bench/settle.sh). Needs task-spooler; no root, no cgroup
# envelope (that is bench/run.sh).
set -euo pipefail
n=${1:?usage: plain.sh N [ROUNDS]}
rounds=${2:-1}
cd "$(dirname "$0")/.."
# shellcheck source=bench/settle.sh
. bench/settle.sh
command -v tsp >/dev/null || { echo "plain.sh: tsp (task-spooler) is not installed" >&2 && exit 2; }
[ -x bin/benchkit ] || go build -o bin/benchkit ./bench/benchkit
work=$(mktemp -d)
trap 'tsp -K 2>/dev/null || true; rm -rf "$work"' EXIT
export TS_SOCKET=$work/tsp.socket TS_MAXFINISHED=$((n + 10)) TS_SAVELIST_DIR=$work
now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.2f", e - s }'; }

# Each run prints its line and appends "SUBJECT SECONDS" to $work/walls.
run_xargs() {
	local s
	settle_cpu
	s=$(now)
	seq "$n" | xargs -P 2 -I{} true
	wall=$(since "$s")
	echo "xargs -P 2: $n true in $wall s"
	echo "xargs $wall" >>"$work/walls"
}

run_tsp() {
	local s
	settle_cpu
	# Each job's output goes to a file in the TMPDIR its client had.
	mkdir -p "$work/tsp"
	tsp -S 2
	s=$(now)
	for _ in $(seq "$n"); do TMPDIR=$work/tsp tsp true >/dev/null; done
	while tsp | grep -q -E ' (running|queued) '; do sleep 0.01; done
	wall=$(since "$s")
	echo "tsp -S 2: $n tasks in $wall s"
	echo "tsp $wall" >>"$work/walls"
	tsp -K
}

run_controller() {
	local spool=$work/spool$1 pid last="" s
	mkdir -m 700 "$spool"
	bin/benchkit spool-gen --kind trivial --n "$n" --dir "$spool" >/dev/null
	settle_cpu
	s=$(now)
	XDG_STATE_HOME=$work/state$1 LARDON3D_RUN_DIR=$work/run$1 \
		bin/lardon3d-controller run --spool "$spool" --exit-when-done --max-parallel 2 >/dev/null 2>"$work/controller$1.log" &
	pid=$!
	while st=$(cat "/proc/$pid/stat" 2>/dev/null); do last=$st; sleep 0.02; done
	wait "$pid"
	wall=$(since "$s")
	echo "$last" | awk -v n="$n" -v w="$wall" -v t="$(getconf CLK_TCK)" \
		'{ printf "lardon3d-controller: %d tasks in %s s; CPU %.2f s of its own, %.2f s of its batches (%.1f ms per task)\n", n, w, ($14 + $15) / t, ($16 + $17) / t, 1000 * ($14 + $15 + $16 + $17) / t / n }'
	echo "controller $wall" >>"$work/walls"
	rm -rf "$spool"
}

for r in $(seq "$rounds"); do
	[ "$rounds" -eq 1 ] || echo "--- round $r"
	run_xargs
	if [ $((r % 2)) -eq 1 ]; then
		run_tsp
		run_controller "$r"
	else
		run_controller "$r"
		run_tsp
	fi
done
[ "$rounds" -eq 1 ] && exit 0

median() { grep "^$1 " "$work/walls" | cut -d' ' -f2 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "--- medians of $rounds rounds"
for subject in xargs tsp controller; do
	echo "$subject: $(median "$subject") s ($(grep "^$subject " "$work/walls" | cut -d' ' -f2 | paste -sd' '))"
done
awk -v c="$(median controller)" -v t="$(median tsp)" 'BEGIN { printf "controller ÷ tsp: %.2f× (medians)\n", c / t }'
echo "controller ÷ tsp by round: $(paste <(grep '^tsp ' "$work/walls" | cut -d' ' -f2) <(grep '^controller ' "$work/walls" | cut -d' ' -f2) | awk '{ printf "%s%.2f×", (NR > 1 ? " " : ""), $2 / $1 }')"
