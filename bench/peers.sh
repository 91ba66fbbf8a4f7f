#!/usr/bin/env bash
# peers.sh TOOL ARGS... — run a job list (one shell line per job) or N trivial
# jobs the way a user of that tool would, and return when all have ended.
#   peers.sh tsp SLOTS JOBFILE          task-spooler, private server, SLOTS slots
#   peers.sh parallel JOBS JOBFILE [MEMFREE]   GNU parallel -j JOBS [--memfree MEMFREE --retries 3]
#   peers.sh xargs PROCS JOBFILE        xargs -P PROCS
#   peers.sh tsp-true SLOTS N | parallel-true JOBS N | xargs-true PROCS N
# Exit status: 0 when every job exited 0.
set -u
tool=$1
shift
case $tool in
tsp | tsp-true)
	slots=$1 src=$2
	# A private server (its own socket), started here inside the envelope;
	# outputs go to files under BENCH_WORK, as by default they go to /tmp.
	export TS_SOCKET=${BENCH_WORK:-/tmp}/tsp.$$.sock TMPDIR=${BENCH_WORK:-/tmp}/tsp.$$ TS_MAXFINISHED=1000000
	mkdir -p "$TMPDIR"
	tsp -S "$slots"
	last=
	if [ "$tool" = tsp-true ]; then
		for ((i = 0; i < src; i++)); do last=$(tsp true); done
	else
		while read -r line; do
			[ -n "$line" ] || continue
			# shellcheck disable=SC2086 # job lines are plain words
			last=$(tsp $line)
		done <"$src"
	fi
	[ -n "$last" ] && tsp -w "$last" >/dev/null 2>&1
	while tsp -l | awk 'NR > 1 && ($2 == "running" || $2 == "queued") { found = 1 } END { exit !found }'; do
		sleep 0.05
	done
	bad=$(tsp -l | awk 'NR > 1 && $2 == "finished" && $4 != 0 { n++ } END { print n + 0 }')
	tsp -K >/dev/null 2>&1 || true
	rm -rf "$TS_SOCKET" "$TMPDIR"
	[ "$bad" -eq 0 ]
	;;
parallel)
	jobs=$1 src=$2 memfree=${3:-}
	if [ -n "$memfree" ]; then
		# parallel kills the youngest job when free memory falls under half of
		# MEMFREE; --retries is what puts it back on the queue.
		parallel --will-cite -j "$jobs" --memfree "$memfree" --retries 3 <"$src"
	else
		parallel --will-cite -j "$jobs" <"$src"
	fi
	;;
parallel-true)
	seq "$2" | parallel --will-cite -j "$1" true
	;;
xargs)
	xargs -d '\n' -n 1 -P "$1" sh -c <"$2"
	;;
xargs-true)
	seq "$2" | xargs -n 1 -P "$1" true
	;;
*)
	echo "peers.sh: unknown tool $tool" >&2
	exit 2
	;;
esac
