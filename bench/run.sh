#!/usr/bin/env bash
# bench/run.sh — lardon3d-controller side by side with the tools users would
# pick instead (task-spooler, GNU parallel, xargs), and against the physical
# limit. One command, one run, one table (issue 6). `make bench` runs it.
#
#   bash bench/run.sh [--scale F] [--mem-scale F] [--only CASE[,CASE...]]
#                     [--fast] [--again] [--warmup S] [--out DIR] [--no-install]
#                     [--slurm]
#
# Cases: micro, reaction, throughput, idle, flood, crash, packing-A, packing-B,
# packing-C, packing-D, packing-E ("packing" means the five). --scale 0.05 shrinks counts and CPU so the whole run is a
# one-minute smoke test; --mem-scale shrinks the memory figures and the 8 GiB
# budget alike (smoke tests on a shared machine). --fast leaves out the two
# peers of workload A that run whole tasks one at a time (about 300 s each).
# --again runs the controller once more after each packing case's peers:
# this machine's speed drifts by 10 % within a run, and the controller
# runs first. --warmup S (default 180 at scale 1, else 0) runs workload A's
# hand split, unmeasured, for S seconds before the first packing case: on
# this machine whichever subject ran first was the slowest, by 7 to 14 %.
# The table goes to stdout and to OUT/results.md; a full run (scale 1, every
# case) also writes bench/results.md, which the README quotes.
#
# Needs root: the 8 GiB envelope is a memory cgroup (v1 or v2) created under
# the caller's own cgroup, holding the controller and every peer in turn.
# Environment: CONTROLLER, SYNTH (binaries; default bin/), CONTROLLER_FLAGS
# (extra flags for `lardon3d-controller run`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
# shellcheck source=bench/settle.sh
. "$BENCH/settle.sh"
SCALE=1 MEM_SCALE="" ONLY="" FAST=0 AGAIN=0 WARMUP="" INSTALL=1 SLURM=0
OUT=$BENCH/out
ALL_CASES="micro reaction throughput idle flood crash packing-A packing-B packing-C packing-D packing-E"

usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
	case $1 in
	--scale) SCALE=$2 && shift ;;
	--mem-scale) MEM_SCALE=$2 && shift ;;
	--only) ONLY=$2 && shift ;;
	--out) OUT=$2 && shift ;;
	--fast) FAST=1 ;;
	--again) AGAIN=1 ;;
	--warmup) WARMUP=$2 && shift ;;
	--no-install) INSTALL=0 ;;
	--slurm) SLURM=1 ;;
	-h | --help) usage && exit 0 ;;
	*) echo "run.sh: unknown argument $1" >&2 && usage >&2 && exit 2 ;;
	esac
	shift
done

if [ -z "$WARMUP" ]; then
	WARMUP=$(awk -v s="$SCALE" 'BEGIN { print (s < 1) ? 0 : 180 }')
fi
[[ "$WARMUP" =~ ^[0-9]+$ ]] || { echo "run.sh: --warmup wants whole seconds, not $WARMUP" >&2 && exit 2; }
if [ -z "$MEM_SCALE" ]; then
	MEM_SCALE=$(awk -v s="$SCALE" 'BEGIN { print (s < 1) ? 0.25 : 1 }')
fi
cases=""
for c in ${ONLY//,/ }; do
	case $c in
	packing) cases="$cases packing-A packing-B packing-C packing-D packing-E" ;;
	packing-a) cases="$cases packing-A" ;;
	packing-b) cases="$cases packing-B" ;;
	packing-c) cases="$cases packing-C" ;;
	packing-d) cases="$cases packing-D" ;;
	packing-e) cases="$cases packing-E" ;;
	*) cases="$cases $c" ;;
	esac
done
ONLY=${cases# }
for c in $ONLY; do
	case " $ALL_CASES " in *" $c "*) ;; *) echo "run.sh: unknown case $c (one of: $ALL_CASES)" >&2 && exit 2 ;; esac
done
want() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }

log() { printf '\n== %s\n' "$*"; }
# scaled N MIN: round(N * SCALE), at least MIN.
scaled() { awk -v n="$1" -v s="$SCALE" -v m="$2" 'BEGIN { v = int(n * s + 0.5); if (v < m) v = m; print v }'; }

[ "$(id -u)" -eq 0 ] || { echo "run.sh: needs root for the memory cgroup" >&2 && exit 1; }
# The flood times each listing with bash's own clock (bash 5).
[ -n "${EPOCHREALTIME:-}" ] || { echo "run.sh: needs bash 5 or later (EPOCHREALTIME)" >&2 && exit 1; }
NPROC=$(nproc)

# --- tools -----------------------------------------------------------------
if [ "$INSTALL" = 1 ]; then
	missing=()
	command -v tsp >/dev/null || missing+=(task-spooler)
	if ! parallel --version 2>/dev/null | grep -q 'GNU parallel'; then missing+=(parallel); fi
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y "${missing[@]}" >/dev/null || { apt-get update >/dev/null && apt-get install -y "${missing[@]}" >/dev/null; }
	fi
fi
# Debian names task-spooler's binary tsp (ts is moreutils' timestamper).
command -v tsp >/dev/null || { echo "run.sh: tsp (task-spooler) missing" >&2 && exit 1; }
parallel --version 2>/dev/null | grep -q 'GNU parallel' || { echo "run.sh: GNU parallel missing (moreutils' parallel is another tool)" >&2 && exit 1; }
if [ "$SLURM" = 1 ]; then
	echo "run.sh: --slurm is not implemented (needs munge, slurmctld/slurmd and a one-node config); continuing without Slurm" >&2
fi

# The last run's output (tens of thousands of files) is moved aside and
# removed when this run ends, not before its cases: ext4 without a journal
# skips, when it allocates an inode, every inode freed in the last one to
# six minutes (recently_deleted), so a mass deletion just before a case
# slows each file it creates, the controller's (a log and a status write
# a task) more than tsp's (one output file a job).
OLD_OUT=""
if [ -e "$OUT" ]; then
	OLD_OUT=$(mktemp -d "$(dirname "$OUT")/.old-out.XXXXXX")
	mv "$OUT" "$OLD_OUT/"
fi
mkdir -p "$OUT/bin" "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

log "building the bench helpers"
(cd "$ROOT" && go build -o "$OUT/bin/benchkit" ./bench/benchkit)
BK=$OUT/bin/benchkit
NOTES=()

CONTROLLER=${CONTROLLER:-$ROOT/bin/lardon3d-controller}
SYNTH=${SYNTH:-$ROOT/bin/lardon3d-synth}
if [ ! -x "$SYNTH" ]; then
	echo "run.sh: $SYNTH missing; building it into $OUT/bin" >&2
	(cd "$ROOT" && go build -o "$OUT/bin/lardon3d-synth" ./cmd/lardon3d-synth) && SYNTH=$OUT/bin/lardon3d-synth ||
		{ echo "run.sh: cannot build the synthetic step" >&2 && exit 1; }
fi
HAVE_CTL=1
if [ ! -x "$CONTROLLER" ]; then
	HAVE_CTL=0
	NOTES+=("lardon3d-controller binary not found at $CONTROLLER: its rows are missing")
	echo "run.sh: $CONTROLLER missing: peers only" >&2
fi

# --- the envelope ----------------------------------------------------------
BUDGET=$(awk -v s="$MEM_SCALE" 'BEGIN { printf "%.0f", int(8192 * s + 0.5) * 1048576 }')
CG_STATE=$OUT/cgroup.json
"$BK" cgroup-create --name "lardon3d-bench-$$" --limit "$BUDGET" --state "$CG_STATE" | tee "$OUT/logs/cgroup.txt"
# shellcheck disable=SC1090
. "$CG_STATE.env"
ENVELOPE="cgroup v$BENCH_CG_VERSION, memory limit $((BUDGET / 1048576)) MiB (no swap); controller and peers inside it in turn"

BG_PIDS=()
cleanup() {
	for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	"$BK" cgroup-destroy --state "$CG_STATE" 2>/dev/null || true
	# This run's predecessor, and any a failed run left.
	rm -rf "$(dirname "$OUT")"/.old-out.*
}
trap cleanup EXIT

CTL_FLAGS=(--memory-capacity "$BUDGET" --max-parallel "$NPROC")
# Every controller run learns into a history under OUT, never into the
# machine's: the packing workloads share one profile (custom/lardon3d-synth)
# at different costs, so each packing case learns into its own (its
# controller runs in turn, as a user running it again), D's and E's runs
# each into an empty one, and the rest into OUT/history.db. In one
# history, E's first run was sized from D's batches (517.6 s against
# 291.9 s on its own, 2026-12-05), and each run from the runs before it.
HISTORY=$OUT/history.db
# shellcheck disable=SC2206 # word splitting is the point
[ -n "${CONTROLLER_FLAGS:-}" ] && CTL_FLAGS+=(${CONTROLLER_FLAGS})
export BENCH_WORK=$OUT/work
mkdir -p "$BENCH_WORK"

# start_controller SPOOL LOG: the controller, inside the envelope, in the
# background; sets CTL_PID.
start_controller() {
	"$BK" enter --state "$CG_STATE" -- "$CONTROLLER" run --spool "$1" --history "$HISTORY" "${CTL_FLAGS[@]}" 2>"$2" &
	CTL_PID=$!
	BG_PIDS+=("$CTL_PID")
}
stop_controller() {
	kill "$CTL_PID" 2>/dev/null || true
	wait "$CTL_PID" 2>/dev/null || true
}

# --- 1. micro --------------------------------------------------------------
if want micro; then
	log "micro: go test -bench"
	benchtime=1s
	[ "$SCALE" = 1 ] || benchtime=100ms
	: >"$OUT/gobench.txt"
	for spec in "./pkg/governor BenchmarkDecide reservations=10000" "./pkg/queue BenchmarkScan pending=10000" "./pkg/spool BenchmarkWriteStatus" "./pkg/spool BenchmarkWriteStatuses"; do
		read -r pkg name sub <<<"$spec"
		pat="^$name\$"
		[ -n "$sub" ] && pat="$pat/^$sub\$"
		(cd "$ROOT" && go test -run '^$' -bench "$pat" -benchmem -benchtime "$benchtime" "$pkg") >>"$OUT/gobench.txt" 2>&1 || true
	done
	"$BK" gobench --in "$OUT/gobench.txt" --results "$RESULTS" \
		--want BenchmarkDecide/reservations=10000 --want BenchmarkScan/pending=10000 --want BenchmarkWriteStatus --want BenchmarkWriteStatuses
fi

# --- 2. reaction -----------------------------------------------------------
if want reaction && [ "$HAVE_CTL" = 1 ]; then
	n=$(scaled 200 10)
	log "reaction: $n drops into a running controller's spool"
	spool=$OUT/reaction/spool
	mkdir -p "$spool" && chmod 700 "$spool"
	start_controller "$spool" "$OUT/logs/reaction.log"
	# Three warm-up drops, not recorded, so the first figure is not start-up.
	"$BK" react --spool "$spool" --n 3 --prefix warmup --results "$OUT/warmup.jsonl" >/dev/null || true
	"$BK" react --spool "$spool" --n "$n" --results "$RESULTS" ||
		"$BK" record --results "$RESULTS" --case reaction --subject lardon3d-controller --note "react failed"
	stop_controller
fi

# --- 3. throughput ---------------------------------------------------------
if want throughput; then
	n=$(scaled 2000 20)
	log "throughput: $n trivial tasks (true), $NPROC at a time"
	m=("$BK" measure --state "$CG_STATE" --results "$RESULTS" --case throughput --items-total "$n")
	if [ "$HAVE_CTL" = 1 ]; then
		spool=$OUT/throughput/spool
		mkdir -p "$spool" && chmod 700 "$spool"
		# Writing the manifests is the controller's enqueue: it is timed.
		# Each subject starts once the pressure of the one before settled.
		settle_cpu
		"${m[@]}" --subject lardon3d-controller --spool "$spool" -- bash -c \
			'"$0" spool-gen --kind trivial --n "$1" --dir "$2" && shift 2 && exec "$@"' \
			"$BK" "$n" "$spool" "$CONTROLLER" run --spool "$spool" --exit-when-done --history "$HISTORY" "${CTL_FLAGS[@]}" 2>"$OUT/logs/throughput.log"
	fi
	settle_cpu
	"${m[@]}" --subject "tsp -S $NPROC" --exit0-means-done -- bash "$BENCH/peers.sh" tsp-true "$NPROC" "$n"
	settle_cpu
	"${m[@]}" --subject "parallel -j $NPROC" --exit0-means-done -- bash "$BENCH/peers.sh" parallel-true "$NPROC" "$n"
	settle_cpu
	"${m[@]}" --subject "xargs -P $NPROC" --exit0-means-done -- bash "$BENCH/peers.sh" xargs-true "$NPROC" "$n"
fi

# --- 4. idle ---------------------------------------------------------------
if want idle && [ "$HAVE_CTL" = 1 ]; then
	n=$(scaled 10000 200)
	secs=$(scaled 60 3)
	log "idle: controller on $n Done manifests for $secs s"
	spool=$OUT/idle/spool
	mkdir -p "$spool" && chmod 700 "$spool"
	"$BK" spool-gen --kind done --n "$n" --dir "$spool" --prefix done
	sleep 1 && touch "$OUT/idle/.generated"
	start_controller "$spool" "$OUT/logs/idle.log"
	"$BK" idle --pid "$CTL_PID" --seconds "$secs" --files "$n" --results "$RESULTS" || true
	stop_controller
	changed=$(find "$spool" -name '*.yaml' -newer "$OUT/idle/.generated" | wc -l)
	reran=$(grep -c '"from":' "$OUT/logs/idle.log" || true)
	[ "$changed" -eq 0 ] || NOTES+=("idle: the controller rewrote $changed of the $n Done manifests at start-up; phase transitions in its log: $reran")
fi

# --- 4b. flood ------------------------------------------------------------
# 10,000 trivial tasks moved into a running controller's spool at once; its
# resident memory (VmRSS, every 100 ms) and `get`'s latency (one listing
# after another) sampled until every task is Done. After each listing the
# same binary runs once doing nothing (`--version`): the floor a process
# start sets on this machine at that moment, beside get's figure.
if want flood && [ "$HAVE_CTL" = 1 ]; then
	n=$(scaled 10000 200)
	log "flood: $n trivial tasks dropped at once"
	dir=$OUT/flood
	mkdir -p "$dir/staged" "$dir/spool" && chmod 700 "$dir/spool"
	"$BK" spool-gen --kind trivial --n "$n" --dir "$dir/staged"
	# Not --exit-when-done: an empty spool is settled at once.
	start_controller "$dir/spool" "$OUT/logs/flood.log"
	sleep 1
	t0=$(date +%s%N)
	find "$dir/staged" -name '*.yaml' -exec mv -t "$dir/spool" {} +
	rss_peak=0 done_n=0
	: >"$dir/get_ms"
	: >"$dir/floor_ms"
	deadline=$(($(date +%s) + 900))
	while kill -0 "$CTL_PID" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do
		r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$CTL_PID/status" 2>/dev/null || true)
		if [ -n "$r" ] && [ "$r" -gt "$rss_peak" ]; then rss_peak=$r; fi
		# bash's clock, not $(date): a date process per sample was counted
		# in the listing's time (6 ms on an idle machine, more in the flood).
		g0=${EPOCHREALTIME/[.,]/}
		"$CONTROLLER" get --spool "$dir/spool" >/dev/null 2>&1 || true
		g1=${EPOCHREALTIME/[.,]/}
		"$CONTROLLER" --version >/dev/null 2>&1 || true
		g2=${EPOCHREALTIME/[.,]/}
		echo $(((g1 - g0) / 1000)) >>"$dir/get_ms"
		echo $(((g2 - g1) / 1000)) >>"$dir/floor_ms"
		done_n=$(grep -c '"phase":"Done"' "$OUT/logs/flood.log" || true)
		[ "$done_n" -ge "$n" ] && break
		sleep 0.1
	done
	t1=$(date +%s%N)
	stop_controller
	p50max() { sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR == 0) print 0, 0, 0; else print NR, v[int((NR + 1) / 2)], v[NR] }'; }
	read -r gn gp50 gmax < <(p50max "$dir/get_ms")
	read -r fn fp50 fmax < <(p50max "$dir/floor_ms")
	"$BK" record --results "$RESULTS" --case flood --subject lardon3d-controller n="$n" failed=$((n - done_n)) \
		wall_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')" \
		rss_peak_mb="$(awk -v k="$rss_peak" 'BEGIN { printf "%.1f", k / 1024 }')" get_n="$gn" get_p50_ms="$gp50" get_max_ms="$gmax" \
		floor_n="$fn" floor_p50_ms="$fp50" floor_max_ms="$fmax"
fi

# --- 4c. crash -------------------------------------------------------------
# kill -9 at random moments during a run of 2,000 trivial tasks, 10 times,
# then a run to the end: the e2e test TestKill9DuringManyTinyTasks at full
# size (`make test` runs it with 200 tasks and 3 kills).
if want crash && [ "$HAVE_CTL" = 1 ]; then
	n=$(scaled 2000 50)
	log "crash: 10 kill -9 during $n tasks"
	t0=$(date +%s%N)
	if (cd "$ROOT" && LARDON3D_CRASH_TASKS=$n LARDON3D_CRASH_KILLS=10 LARDON3D_BIN=$(dirname "$CONTROLLER") \
		go test -count=1 -timeout 20m -run '^TestKill9DuringManyTinyTasks$' -v ./cmd/lardon3d-controller) >"$OUT/logs/crash.log" 2>&1; then
		passed=1 note=""
	else
		passed=0 note="see logs/crash.log"
	fi
	"$BK" record --results "$RESULTS" --case crash --subject lardon3d-controller --note "$note" tasks="$n" kills=10 passed="$passed" \
		wall_s="$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')"
fi

# --- 5. packing ------------------------------------------------------------
# packing W: workload W through the controller and every peer, one at a time.
packing() {
	local w=$1 dir=$OUT/packing-$1
	log "packing, workload $w"
	"$BK" gen --workload "$w" --scale "$SCALE" --mem-scale "$MEM_SCALE" --synth "$SYNTH" \
		--wrapper "$BENCH/part.sh" --dir "$dir" --results "$RESULTS" | tee "$OUT/logs/workload-$w.txt"
	# shellcheck disable=SC1091
	. "$dir/workload.env"
	local timeout=$(awk -v c="$CPU_NOMINAL" -v n="$NPROC" 'BEGIN { printf "%.0f", 4 * c / n + 90 }')
	local memfree=$((MAX_WHOLE < BUDGET * 15 / 16 ? MAX_WHOLE : BUDGET * 15 / 16))
	local m=("$BK" measure --state "$CG_STATE" --results "$RESULTS" --case "packing-$w" --items-total "$ITEMS" --timeout "${timeout}s")
	if [ "$HAVE_CTL" = 1 ]; then
		local spool=$dir/spool
		mkdir -p "$spool" && chmod 700 "$spool" && cp "$dir"/manifests/*.yaml "$spool"/
		"${m[@]}" --subject lardon3d-controller --spool "$spool" --makespan-file "$dir/controller.makespan" -- \
			"$CONTROLLER" run --spool "$spool" --exit-when-done --history "$dir/history.db" "${CTL_FLAGS[@]}" 2>"$OUT/logs/packing-$w.log" || true
		batch_peaks "$w" "$spool"
		# The same workload without cgroups (the RSS sampler alone), in the
		# same run: enforcement's cost, before and after.
		local spool_off=$dir/spool-sampler
		mkdir -p "$spool_off" && chmod 700 "$spool_off" && cp "$dir"/manifests/*.yaml "$spool_off"/
		"${m[@]}" --subject "lardon3d-controller --cgroups off (RSS sampler only)" --spool "$spool_off" -- \
			"$CONTROLLER" run --spool "$spool_off" --exit-when-done --cgroups off --history "$dir/history.db" "${CTL_FLAGS[@]}" 2>"$OUT/logs/packing-$w-sampler.log" || true
		if [ "$FAST" = 1 ] && [ -s "$dir/controller.makespan" ]; then
			timeout=$(awk -v t="$timeout" -v c="$(cat "$dir/controller.makespan")" 'BEGIN { c = 1.5 * c + 1; printf "%.0f", (c < t) ? c : t }')
			m=("$BK" measure --state "$CG_STATE" --results "$RESULTS" --case "packing-$w" --items-total "$ITEMS" --timeout "${timeout}s")
		fi
	fi
	peer() { # peer SUBJECT KIND LOGNAME -- COMMAND...
		local subject=$1 kind=$2 tag=$3
		shift 4
		BENCH_DONE_LOG=$dir/done-$tag.log "${m[@]}" --subject "$subject" --kind "$kind" --done-log "$dir/done-$tag.log" -- \
			env BENCH_DONE_LOG="$dir/done-$tag.log" "$@" >"$OUT/logs/packing-$w-$tag.log" 2>&1 || true
		tail -n 1 "$OUT/logs/packing-$w-$tag.log"
	}
	# Workload C is A growing item by item: A's whole-task serial peers
	# (about 300 s each) would say nothing new about it.
	local serial=1
	if [ "$w" = C ] || { [ "$FAST" = 1 ] && [ "$w" = A ]; }; then
		serial=0
	fi
	if [ "$serial" = 1 ]; then
		peer "tsp -S $SLOTS_WHOLE, whole tasks" whole tsp-whole -- bash "$BENCH/peers.sh" tsp "$SLOTS_WHOLE" "$dir/jobs-whole.txt"
	fi
	peer "tsp -S $NPROC, split in 2 by hand" split tsp-split2 -- bash "$BENCH/peers.sh" tsp "$NPROC" "$dir/jobs-split2.txt"
	peer "parallel -j $NPROC, split in 2 by hand" split parallel-split2 -- bash "$BENCH/peers.sh" parallel "$NPROC" "$dir/jobs-split2.txt"
	peer "parallel --memfree $((memfree / 1048576))M --retries 3, whole (host /proc/meminfo)" memfree parallel-memfree-host -- \
		bash "$BENCH/peers.sh" parallel "$NPROC" "$dir/jobs-whole.txt" "$memfree"
	if [ "$serial" = 1 ]; then
		peer "parallel --memfree $((memfree / 1048576))M --retries 3, whole (cgroup view of meminfo)" memfree parallel-memfree-cg -- \
			env PATH="$SHIM:$PATH" bash "$BENCH/peers.sh" parallel "$NPROC" "$dir/jobs-whole.txt" "$memfree"
	fi
	peer "xargs -P $NPROC, whole tasks" naive xargs -- bash "$BENCH/peers.sh" xargs "$NPROC" "$dir/jobs-whole.txt"
	if [ "$AGAIN" = 1 ] && [ "$HAVE_CTL" = 1 ]; then
		# The controller once more, after the peers: on a machine whose
		# speed drifts during a run, first and last bracket the peers.
		local spool_again=$dir/spool-again
		mkdir -p "$spool_again" && chmod 700 "$spool_again" && cp "$dir"/manifests/*.yaml "$spool_again"/
		"${m[@]}" --subject "lardon3d-controller, again after the peers" --spool "$spool_again" -- \
			"$CONTROLLER" run --spool "$spool_again" --exit-when-done --history "$dir/history.db" "${CTL_FLAGS[@]}" 2>"$OUT/logs/packing-$w-again.log" || true
	fi
}
# batch_peaks W SPOOL: the largest peak and working set the batches' own
# cgroups reported (the "=== batch N ended" lines of the task logs), as a note.
batch_peaks() {
	local peaks
	peaks=$(cat "$2"/.lardon3d/logs/*.log 2>/dev/null | awk '
		function bytes(v,   n, u) {
			n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
			if (u == "KiB") n *= 1024; else if (u == "MiB") n *= 1048576; else if (u == "GiB") n *= 1073741824
			return n
		}
		/^=== batch [0-9]+ ended:/ {
			for (i = 1; i <= NF; i++) {
				if ($i == "memory" && $(i - 1) == "peak") { p = $(i + 1); sub(/,$/, "", p); if (bytes(p) > maxp) maxp = bytes(p) }
				if ($i == "set" && $(i - 1) == "working") { s = $(i + 1); sub(/,$/, "", s); if (bytes(s) > maxs) maxs = bytes(s) }
			}
			if (/in cgroup|working set/) n++
		}
		END { if (n) printf "%d batches in cgroups: largest kernel peak %.0f MiB, largest working set %.0f MiB", n, maxp / 1048576, maxs / 1048576 }')
	[ -n "$peaks" ] && NOTES+=("packing-$1, the controller's batch cgroups: $peaks")
	return 0
}
# learned W: workload W (D: declared at 0.7x its costs; E: workload A with no
# memory declared) through the controller, then the same workload declared
# exactly through the controller, the reference of its target. Each run
# starts from an empty state directory: nothing is learned in advance.
learned() {
	local w=$1 dir=$OUT/packing-$1
	log "packing, workload $w (learned estimates)"
	"$BK" gen --workload "$w" --scale "$SCALE" --mem-scale "$MEM_SCALE" --synth "$SYNTH" \
		--wrapper "$BENCH/part.sh" --dir "$dir" --results "$RESULTS" | tee "$OUT/logs/workload-$w.txt"
	# shellcheck disable=SC1091
	. "$dir/workload.env"
	local timeout=$(awk -v c="$CPU_NOMINAL" -v n="$NPROC" 'BEGIN { printf "%.0f", 4 * c / n + 90 }')
	[ "$HAVE_CTL" = 1 ] || return 0
	local subject from
	for from in manifests manifests-exact; do
		subject=lardon3d-controller
		[ "$from" = manifests-exact ] && subject="lardon3d-controller, declared exactly"
		local spool=$dir/spool-$from
		rm -rf "$spool" "$dir/history-$from.db" && mkdir -p "$spool" && chmod 700 "$spool" && cp "$dir/$from"/*.yaml "$spool"/
		"$BK" measure --state "$CG_STATE" --results "$RESULTS" --case "packing-$w" --items-total "$ITEMS" --timeout "${timeout}s" \
			--subject "$subject" --spool "$spool" -- \
			"$CONTROLLER" run --spool "$spool" --exit-when-done --history "$dir/history-$from.db" "${CTL_FLAGS[@]}" 2>"$OUT/logs/packing-$w-$from.log" || true
		"$CONTROLLER" estimates --spool "$spool" --history "$dir/history-$from.db" >"$OUT/logs/packing-$w-$from.estimates" 2>&1 || true
	done
}
# warmup: workload A split in 2 by hand through parallel, inside the
# envelope, for WARMUP seconds and not measured, before the first packing
# case. This virtual machine speeds up while a memory-heavy run goes on:
# the first subject of a case was the slowest in the runs of 2026-12-04
# and 2026-12-05, by 7 to 14 %, whichever it was. The "again" row
# (--again) still brackets what drift is left.
warmup() {
	[ "$WARMUP" -gt 0 ] || return 0
	local dir=$OUT/warmup
	log "warm-up: workload A split in 2 by hand, ${WARMUP} s, not measured"
	"$BK" gen --workload A --scale "$SCALE" --mem-scale "$MEM_SCALE" --synth "$SYNTH" \
		--wrapper "$BENCH/part.sh" --dir "$dir" --results "$dir/results.jsonl" >"$OUT/logs/warmup.txt"
	# The job list again and again until the time is up (more items than
	# it has, so that measure only stops it at its timeout).
	"$BK" measure --state "$CG_STATE" --results "$dir/results.jsonl" --case warmup --items-total 1000000000 \
		--timeout "${WARMUP}s" --subject warm-up --kind split --done-log "$dir/done.log" -- \
		env BENCH_DONE_LOG="$dir/done.log" bash -c 'while :; do bash "$0" parallel "$1" "$2" || true; done' \
		"$BENCH/peers.sh" "$NPROC" "$dir/jobs-split2.txt" >>"$OUT/logs/warmup.txt" 2>&1 || true
	NOTES+=("warm-up: workload A split by hand ran ${WARMUP} s, not measured, before the first packing case ($(wc -l <"$dir/done.log" 2>/dev/null || echo 0) parts done)")
}
if want packing-D || want packing-E || want packing-A || want packing-B || want packing-C; then warmup; fi
if want packing-D; then learned D; fi
if want packing-E; then learned E; fi

if want packing-A || want packing-B || want packing-C; then
	SHIM=$OUT/shim
	mkdir -p "$SHIM"
	cp "$BENCH/shim/awk" "$SHIM/awk"
	cp "$CG_STATE.env" "$SHIM/cgroup.env"
	want packing-A && packing A
	want packing-B && packing B
	want packing-C && packing C
	[ "$FAST" = 1 ] && NOTES+=("--fast: workload A's whole-task serial peers (tsp -S 1 whole, parallel --memfree with the cgroup view) were not run, and peers were stopped at 1.5× the controller's makespan")
fi

# --- the table ---------------------------------------------------------------
log "results"
NOTES+=("peak RSS: the sum of /proc/PID/statm resident pages over the envelope's processes, sampled every 50 ms; CPU: the envelope's cpuacct (v1) or cpu.stat (v2)")
NOTES+=("lower bound: max(CPU-seconds / cores, memory·time / budget), CPU-seconds being the larger of the nominal work and the least CPU a complete run used")
NOTES+=("Slurm: not measured (--slurm is not implemented)")
note_args=()
for n in "${NOTES[@]}"; do note_args+=(--note "$n"); done
"$BK" report --results "$RESULTS" --out "$OUT/results.md" --scale "$SCALE" --mem-scale "$MEM_SCALE" \
	--envelope "$ENVELOPE" "${note_args[@]}"
if [ "$SCALE" = 1 ] && [ "$MEM_SCALE" = 1 ] && [ -z "$ONLY" ] && [ "$FAST" = 0 ]; then
	cp "$OUT/results.md" "$BENCH/results.md"
	echo "written: $BENCH/results.md"
else
	echo "written: $OUT/results.md (a partial or scaled run does not replace bench/results.md)"
fi
