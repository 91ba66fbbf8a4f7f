#!/usr/bin/env bash
# part.sh NAME START N COMMAND... — run one hand-split part of a task the way
# the controller would run one batch: set the LARDON3D_* batch environment,
# write the items file, run the step, and log the outcome to $BENCH_DONE_LOG
# ("ok NAME N" or "fail NAME RC"; one short O_APPEND write each).
set -u
name=$1 start=$2 n=$3
shift 3
dir=${BENCH_WORK:-/tmp}/items
mkdir -p "$dir"
items=$dir/$name.txt
seq -f 'item-%06g' "$start" $((start + n - 1)) >"$items"
export LARDON3D_TASK=${name%-p*} LARDON3D_BATCH_INDEX=0 LARDON3D_BATCH_START=$start \
	LARDON3D_BATCH_SIZE=$n LARDON3D_ITEMS_TOTAL=$n LARDON3D_ITEMS_FILE=$items \
	LARDON3D_THREADS=1 OMP_NUM_THREADS=1
"$@" >/dev/null
rc=$?
if [ "$rc" -eq 0 ]; then
	echo "ok $name $n" >>"${BENCH_DONE_LOG:-/dev/null}"
else
	echo "fail $name $rc" >>"${BENCH_DONE_LOG:-/dev/null}"
fi
exit "$rc"
