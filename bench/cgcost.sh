#!/usr/bin/env bash
# bench/cgcost.sh — what a cgroup per batch costs the batch (issue 35):
# the same synthetic batches (workload C: each item's memory mapped when
# its turn comes, 300 MiB + 60 MiB per item), two streams side by side as
# two batches run on two CPUs, placed
#   none       where this shell is (the hand splits' jobs: tsp, parallel)
#   memory     each batch in a memory cgroup of its own, no limit
#   limit      the same with the limits the controller sets (the exact
#              need × 1.10, the default tolerance; on v1 also the swap
#              limit where accounted and the soft limit at the need)
#   all        limit, plus the other controllers the controller binds a
#              batch with on cgroup v1 (pids, freezer)
# Each placement runs twice, in the order none memory limit all all limit
# memory none, so that a drift of the machine spreads over all of them.
# Compare the kernel and user CPU seconds within one run.
#
#   sudo bash bench/cgcost.sh [SIZE:COUNT]      (default 64:3)
#
# Needs root, and cgroup v1 (memory, pids, freezer mounted apart)
# or v2 (memory, pids; freezing is built in).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SYNTH=${SYNTH:-$ROOT/bin/lardon3d-synth}
[ -x "$SYNTH" ] || { echo "cgcost.sh: $SYNTH missing (make build)" >&2 && exit 1; }
[ "$(id -u)" = 0 ] || { echo "cgcost.sh: needs root (it makes cgroups)" >&2 && exit 1; }
spec=${1:-64:3}
size=${spec%%:*} count=${spec##*:}
mib=$((300 + 60 * size))
limit=$((mib * 110 / 100 * 1024 * 1024))
name=lardon3d-cgcost-$$

if [ -d /sys/fs/cgroup/memory ]; then
	version=v1
	dirs() { # placement -> the cgroup directories of one batch, by controller
		case $1 in
		memory | limit) echo /sys/fs/cgroup/memory/$name/$2 ;;
		all) echo /sys/fs/cgroup/memory/$name/$2 /sys/fs/cgroup/pids/$name/$2 /sys/fs/cgroup/freezer/$name/$2 ;;
		esac
	}
	limitFile=memory.limit_in_bytes
	procsFile=tasks
else
	version=v2
	echo "+memory +pids" >/sys/fs/cgroup/cgroup.subtree_control
	mkdir -p /sys/fs/cgroup/$name
	echo "+memory +pids" >/sys/fs/cgroup/$name/cgroup.subtree_control
	dirs() { case $1 in memory | limit | all) echo /sys/fs/cgroup/$name/$2 ;; esac; }
	limitFile=memory.max
	procsFile=cgroup.procs
fi
cleanup() {
	for d in /sys/fs/cgroup/*/$name /sys/fs/cgroup/$name; do
		[ -d "$d" ] || continue
		find "$d" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
		rmdir "$d" 2>/dev/null || true
	done
}
trap cleanup EXIT

# batch PLACEMENT ID: one synthetic batch, placed.
batch() {
	local d
	for d in $(dirs "$1" "$2"); do
		mkdir -p "$d"
		if [ "$1" != memory ] && [ -e "$d/$limitFile" ]; then
			echo "$limit" >"$d/$limitFile"
			if [ -e "$d/memory.memsw.limit_in_bytes" ]; then echo "$limit" >"$d/memory.memsw.limit_in_bytes"; fi
			if [ -e "$d/memory.soft_limit_in_bytes" ]; then echo $((mib << 20)) >"$d/memory.soft_limit_in_bytes"; fi
		fi
	done
	(
		for d in $(dirs "$1" "$2"); do echo "$BASHPID" >"$d/$procsFile"; done
		exec env LARDON3D_BATCH_SIZE="$size" "$SYNTH" --grow --cpu-per-item 0s
	) >/dev/null
	for d in $(dirs "$1" "$2"); do rmdir "$d"; done
}
export -f batch dirs
export size count mib limit limitFile procsFile name SYNTH

declare -A sys user wall
for p in none memory limit all all limit memory none; do
	# A child's rusage is its own and its children's: one bash waits for
	# both streams, /usr/bin/time reads that bash's.
	out=$(
		/usr/bin/time -f '%S %U %e' bash -c '
			stream() { for ((i = 0; i < count; i++)); do batch "$1" "$2-$i"; done; }
			stream "$0" a & stream "$0" b & wait' "$p" 2>&1 >/dev/null | tail -n 1
	)
	read -r s u w <<<"$out"
	sys[$p]=$(awk -v a="${sys[$p]:-0}" -v b="$s" 'BEGIN { print a + b }')
	user[$p]=$(awk -v a="${user[$p]:-0}" -v b="$u" 'BEGIN { print a + b }')
	wall[$p]=$(awk -v a="${wall[$p]:-0}" -v b="$w" 'BEGIN { print a + b }')
done

echo "cgroup $version, $(nproc) CPUs; 2 streams × $count batches of $size items ($mib MiB each), each placement run twice"
printf '| placement | kernel s | user s | wall s | kernel s per GiB | CPU vs none |\n|---|---|---|---|---|---|\n'
for p in none memory limit all; do
	awk -v p="$p" -v s="${sys[$p]}" -v u="${user[$p]}" -v w="${wall[$p]}" -v c="$count" -v m="$mib" \
		-v base="$(awk -v a="${sys[none]}" -v b="${user[none]}" 'BEGIN { print a + b }')" 'BEGIN {
		gib = 2 * 2 * c * m / 1024
		printf "| %s | %.1f | %.1f | %.1f | %.2f | %.3f× |\n", p, s, u, w, s / gib, (s + u) / base
	}'
done
