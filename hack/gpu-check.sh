#!/usr/bin/env bash
# gpu-check.sh: the controller against a real NVIDIA GPU (issue 38), in one
# go of about two minutes, from the repository root:
#   make build && gcc -O2 -o bin/gpu-vram-alloc hack/gpu-vram-alloc.c -ldl
#   bash hack/gpu-check.sh
# It prints the driver's view and the probe's; runs two tasks whose GPU
# memory contracts together exceed the GPU's free memory (each allocates
# through the CUDA driver, hack/gpu-vram-alloc.c) and shows they never
# overlap; runs one batch that allocates twice its contract and shows it
# stopped as GPUMemoryExceeded and retried larger; and prints the peaks
# recorded beside what the allocator asked (a CUDA context adds its own
# few hundred MiB). LARDON3D_BIN and GPU_ALLOC name other binaries; a
# dry run here uses a fake nvidia-smi and allocator (hack/gpu-fake/).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${LARDON3D_BIN:-bin/lardon3d-controller}")
alloc=${GPU_ALLOC:-bin/gpu-vram-alloc}
[ -x "$alloc" ] || gcc -O2 -Wall -o "$alloc" hack/gpu-vram-alloc.c -ldl
alloc=$(realpath "$alloc")
work=$(mktemp -d)
spool=$work/spool
mkdir -p "$spool"
# The machine's learned history and registry: this run's own.
export XDG_STATE_HOME=$work/state LARDON3D_RUN_DIR=$work/run
say() { printf '\n== %s\n' "$*"; }
smi() { timeout 30 nvidia-smi "$@"; }

say "the driver's view"
smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu --format=csv
smi --query-compute-apps=gpu_uuid,pid,used_gpu_memory --format=csv

say "the allocator alone, 1024 MiB for 5 s: what the driver attributes to its pid"
timeout 60 "$alloc" 1024 5 >"$work/alloc.out" &
tpid=$!
for _ in $(seq 150); do # up to 30 s for the CUDA context and the allocation
	grep -q allocated "$work/alloc.out" || ! kill -0 "$tpid" 2>/dev/null && break
	sleep 0.2
done
cat "$work/alloc.out"
echo "allocator pid $(pgrep -P "$tpid" || echo "? (timeout's $tpid)")"
smi --query-compute-apps=gpu_uuid,pid,used_gpu_memory --format=csv
wait "$tpid" || echo "allocator FAILED: exit $?"

say "the probe's view (budgets)"
timeout 30 "$bin" budgets --spool "$spool"

free=$(smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | tr -d ' ')
each=$((free * 6 / 10)) # two contracts of 60 % of the free memory
use=$((each / 2))
# Each task learns in a profile of its own: they run the same program, and
# on an H200 (2026-12-04) over's suggestion (45Gi) was learned from a's and
# b's 43 GiB batches while they shared one.
task() { # NAME GPU_MEMORY ALLOC_MIB SECONDS
	cat >"$spool/$1.yaml" <<EOF
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: $1}
spec:
  command: [$alloc, '$3', '$4']
  items: {count: 1}
  resources: {gpuSlots: 1, profile: gpu-check-$1, fixed: {memory: 256Mi, gpuMemory: $2}}
EOF
}
run() { timeout 240 "$bin" run --spool "$spool" --exit-when-done --load-threshold -1 --gpu-slots 2 --log-level warn; }
field() { sed -n "s/^ *$2: *//p" "$spool/$1.yaml" | head -1 | tr -d "'\""; }
epoch() { date -d "$1" +%s; }

say "two tasks of ${each}Mi of GPU memory each (${free} MiB free), each allocating ${use} MiB, two GPU slots"
task a "${each}Mi" "$use" 8
task b "${each}Mi" "$use" 8
run
for t in a b; do
	echo "$t: phase $(field $t phase), batch $(field $t startTime) .. $(field $t endTime), peak GPU memory $(field $t peakGPUMemory), allocated ${use} MiB"
done
if [ -z "$(field a startTime)" ] || [ -z "$(field a endTime)" ] || [ -z "$(field b startTime)" ] || [ -z "$(field b endTime)" ]; then
	echo "VERDICT: a or b did NOT run to its end (no batch times)"
elif [ "$(epoch "$(field a startTime)")" -lt "$(epoch "$(field b endTime)")" ] &&
	[ "$(epoch "$(field b startTime)")" -lt "$(epoch "$(field a endTime)")" ]; then
	echo "VERDICT: a and b OVERLAPPED"
else
	echo "VERDICT: a and b never ran at once"
fi

say "one batch allocating twice its contract: 2048Mi reserved, 4096 MiB allocated"
task over 2048Mi 4096 8
run
echo "over: phase $(field over phase), attempt $(field over attempt), peak GPU memory $(field over peakGPUMemory), allocated 4096 MiB"
grep -h '=== batch' "$(field over logFile)" || true
timeout 30 "$bin" batches over --spool "$spool" || true
if grep -q 'GPUMemoryExceeded' "$(field over logFile)" && [ "$(field over phase)" = Done ]; then
	echo "VERDICT: stopped as GPUMemoryExceeded, then Done under a larger contract"
else
	echo "VERDICT: over was NOT stopped and retried as expected"
fi
timeout 30 "$bin" describe over --spool "$spool" | grep -E 'Last batch|Conditions|EstimateTooLow' || true
