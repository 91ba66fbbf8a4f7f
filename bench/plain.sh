#!/usr/bin/env bash
# plain.sh N: N trivial tasks two at a time, timed plainly, tsp beside the
# controller in one go, as a person would time them (issue 35): tsp -S 2,
# N × `tsp true` from a shell loop, drained; then the controller (bin/) on
# N `true` manifests (benchkit spool-gen --kind trivial) with
# --exit-when-done --max-parallel 2, its own and its batches' CPU from
# /proc/PID/stat. And `xargs -P 2` on N `true`, which says what a process
# start costs on this machine that day: tsp pays two per job, the
# controller one. Needs task-spooler; no root, no cgroup envelope (that is
# bench/run.sh).
set -euo pipefail
n=${1:?usage: plain.sh N}
cd "$(dirname "$0")/.."
command -v tsp >/dev/null || { echo "plain.sh: tsp (task-spooler) is not installed" >&2 && exit 2; }
[ -x bin/benchkit ] || go build -o bin/benchkit ./bench/benchkit
work=$(mktemp -d)
trap 'tsp -K 2>/dev/null || true; rm -rf "$work"' EXIT
export TS_SOCKET=$work/tsp.socket TS_MAXFINISHED=$((n + 10)) TS_SAVELIST_DIR=$work
now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.2f", e - s }'; }

s=$(now)
seq "$n" | xargs -P 2 -I{} true
echo "xargs -P 2: $n true in $(since "$s") s"

tsp -S 2
s=$(now)
for _ in $(seq "$n"); do tsp true >/dev/null; done
while tsp | grep -q -E ' (running|queued) '; do sleep 0.01; done
echo "tsp -S 2: $n tasks in $(since "$s") s"
tsp -K

spool=$work/spool
mkdir -m 700 "$spool"
bin/benchkit spool-gen --kind trivial --n "$n" --dir "$spool" >/dev/null
s=$(now)
XDG_STATE_HOME=$work/state LARDON3D_RUN_DIR=$work/run \
	bin/lardon3d-controller run --spool "$spool" --exit-when-done --max-parallel 2 >/dev/null 2>"$work/controller.log" &
pid=$!
last=""
while st=$(cat "/proc/$pid/stat" 2>/dev/null); do last=$st; sleep 0.02; done
wait "$pid"
wall=$(since "$s")
echo "$last" | awk -v n="$n" -v w="$wall" -v t="$(getconf CLK_TCK)" \
	'{ printf "lardon3d-controller: %d tasks in %s s; CPU %.2f s of its own, %.2f s of its batches (%.1f ms per task)\n", n, w, ($14 + $15) / t, ($16 + $17) / t, 1000 * ($14 + $15 + $16 + $17) / t / n }'
