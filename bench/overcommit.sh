#!/usr/bin/env bash
# overcommit.sh — why one governor per machine (issue 30): two spools whose
# tasks each really hold 600 MiB, each task declaring 700Mi, on a machine
# budget of 1Gi.
#   two:  one controller per spool, each believing it has the 1Gi (what
#         happened before: nothing stopped the second one);
#   one:  one controller serving both spools;
#   refused: the second controller, started as a user would, with the
#         machine's registry in place.
# It samples, every 20 ms, the resident memory of every lardon3d-synth
# process of the run, and prints the peak of their sum against the 1Gi.
# Usage: bash bench/overcommit.sh   (after make build; about 40 s)
set -eu
bin=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/bin}
work=$(mktemp -d -t lardon3d-overcommit.XXXXXX)
trap 'rm -rf "$work"' EXIT
export PATH="$bin:$PATH" XDG_STATE_HOME="$work/state"
flags=(--exit-when-done --memory-capacity 1Gi --memory-reserved -1 --load-threshold -1 --log-level warn)

spools() { # spools DIR: two spools of two tasks each
	for s in a b; do
		mkdir -p "$1/$s" && chmod 700 "$1/$s"
		for t in 1 2; do
			cat >"$1/$s/t$t.yaml" <<YAML
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: t$t}
spec:
  command: [lardon3d-synth, --fixed, 600Mi, --per-item, '0', --cpu-per-item, 0s, --hold, 3s]
  items: {count: 1}
  resources: {fixed: {memory: 700Mi}}
YAML
		done
	done
}

peak_of() { # peak_of CMD...: runs CMD, prints the peak summed RSS (MiB) of lardon3d-synth
	"$@" &
	local pid=$! peak=0 sum
	while kill -0 "$pid" 2>/dev/null; do
		sum=$(ps -C lardon3d-synth -o rss= 2>/dev/null | awk '{s+=$1} END {print int(s/1024)}')
		[ "${sum:-0}" -gt "$peak" ] && peak=$sum
		sleep 0.02
	done
	wait "$pid" || true
	echo "$peak"
}

spools "$work/two"
two=$(peak_of bash -c "
	LARDON3D_RUN_DIR=$work/reg-a lardon3d-controller run --spool $work/two/a ${flags[*]} >/dev/null &
	LARDON3D_RUN_DIR=$work/reg-b lardon3d-controller run --spool $work/two/b ${flags[*]} >/dev/null &
	wait")
spools "$work/one"
one=$(peak_of bash -c "LARDON3D_RUN_DIR=$work/reg lardon3d-controller run --spool $work/one/a --spool $work/one/b ${flags[*]} >/dev/null")

spools "$work/ref"
LARDON3D_RUN_DIR="$work/reg2" lardon3d-controller run --spool "$work/ref/a" "${flags[@]}" >/dev/null &
first=$!
sleep 1
set +e
msg=$(LARDON3D_RUN_DIR="$work/reg2" lardon3d-controller run --spool "$work/ref/b" "${flags[@]}" 2>&1)
code=$?
set -e
wait "$first" || true

printf '| setup | peak summed RSS of the tasks | budget | over-commit |\n|---|---|---|---|\n'
printf '| two controllers, one per spool | %d MiB | 1024 MiB | %s |\n' "$two" "$([ "$two" -gt 1024 ] && echo yes || echo no)"
printf '| one controller, both spools | %d MiB | 1024 MiB | %s |\n' "$one" "$([ "$one" -gt 1024 ] && echo yes || echo no)"
printf '\nsecond controller with the registry: exit %d: %s\n' "$code" "$(echo "$msg" | head -1)"
