# settle.sh, sourced: settle_cpu waits (at most 60 s) until the kernel's
# CPU pressure (/proc/pressure/cpu, some avg10) is at most 5 %, so that a
# run does not start in the wake of the one before. The controller's CPU
# gate reads that figure at its start: after a run that kept both CPUs
# busy it would wait for the pressure to stay below its threshold for
# 10 s before admitting a task, doubling a 10-second run (2,000 trivial
# tasks), whichever build it was. Without PSI it returns at once.
settle_cpu() {
	local i avg
	[ -r /proc/pressure/cpu ] || return 0
	for i in $(seq 600); do
		avg=$(awk '/^some/ { sub("avg10=", "", $2); print $2 }' /proc/pressure/cpu)
		awk -v a="$avg" 'BEGIN { exit !(a <= 5) }' && return 0
		sleep 0.1
	done
	echo "settle_cpu: CPU pressure still ${avg} % after 60 s" >&2
}
