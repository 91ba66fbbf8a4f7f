#!/usr/bin/env bash
# bench/memtouch.sh — what touching memory costs the kernel, per GiB, by
# batch size (issue 35). Two streams side by side, as two batches run on
# two CPUs, each running COUNT synthetic batches of SIZE items (300 MiB +
# 60 MiB per item, as workload A, no CPU burned): every byte is faulted in
# and zeroed by the kernel, then freed at exit. The same memory in total
# for every size, so the kernel seconds per GiB compare.
#
#   bash bench/memtouch.sh [SIZE:COUNT ...]     (default 64:5 32:10 16:20)
#
# On a virtual machine whose host takes free memory back (free page
# reporting: /sys/module/page_reporting), how much was reported meanwhile
# is shown too. Run it on a quiet machine; compare sizes within one run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SYNTH=${SYNTH:-$ROOT/bin/lardon3d-synth}
[ -x "$SYNTH" ] || { echo "memtouch.sh: $SYNTH missing (make build)" >&2 && exit 1; }
REPORTED=/sys/module/page_reporting/parameters/reported_kib
[ $# -gt 0 ] || set -- 64:5 32:10 16:20

printf '| batch | resident per batch | batches | GiB touched | kernel s | kernel s per GiB | user s | wall s | reported by the guest |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for spec in "$@"; do
	size=${spec%%:*} count=${spec##*:}
	mib=$((300 + 60 * size))
	r0=$(cat "$REPORTED" 2>/dev/null || echo "")
	# A child's rusage is its own and its children's: one bash waits for
	# both streams, /usr/bin/time reads that bash's.
	out=$(
		/usr/bin/time -f '%S %U %e' bash -c '
			stream() { for ((i = 0; i < $2; i++)); do LARDON3D_BATCH_SIZE=$1 "$0" --cpu-per-item 0s 2>/dev/null; done; }
			stream "$1" "$2" & stream "$1" "$2" & wait' "$SYNTH" "$size" "$count" 2>&1 >/dev/null | tail -n 1
	)
	read -r sys user wall <<<"$out"
	r1=$(cat "$REPORTED" 2>/dev/null || echo "")
	reported="—"
	if [ -n "$r0" ] && [ -n "$r1" ]; then
		reported="$(((r1 - r0) / 1024)) MiB"
	fi
	awk -v s="$size" -v m="$mib" -v c="$count" -v sys="$sys" -v u="$user" -v w="$wall" -v r="$reported" 'BEGIN {
		gib = 2 * c * m / 1024
		printf "| %d | %d MiB | 2 × %d | %.1f | %.1f | %.2f | %.1f | %.1f | %s |\n", s, m, c, gib, sys, sys / gib, u, w, r
	}'
done
