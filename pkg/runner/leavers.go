package runner

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ReasonLeftCgroup: a process of the batch moved itself out of the
// batch's cgroup (written into another group's cgroup.procs: a batch
// running as root, or as the user who owns the controller's delegated
// cgroups, may): the contract cannot hold, so the batch is killed, the
// process that left and what it started included.
const ReasonLeftCgroup = "LeftCgroup"

// leaverWatch finds the processes that left a batch's cgroup: each
// process seen in the cgroup at a sample (the leader from the start) is
// remembered with its start time; one that is no longer in the cgroup but
// still alive, with the same start time, left it. A process that leaves
// before any sample saw it is found at the end by its environment
// (BatchIDEnv). It is used by the supervising goroutine alone.
type leaverWatch struct {
	procRoot string
	seen     map[int]uint64 // pid -> start ticks
	members  map[int]bool   // scratch: the pids of the current sample
}

// newLeaverWatch starts a watch that knows the leader, with its start
// time when known (leaderTicks 0: read from procRoot).
func newLeaverWatch(procRoot string, leader int, leaderTicks uint64) *leaverWatch {
	w := &leaverWatch{procRoot: procRoot, seen: map[int]uint64{}, members: map[int]bool{}}
	if leaderTicks != 0 {
		w.seen[leader] = leaderTicks
	} else if st, err := readStat(procRoot, leader); err == nil {
		w.seen[leader] = st.startTicks
	}
	return w
}

// check takes the cgroup's live members at a sample and returns the pids
// that left it since the last.
func (w *leaverWatch) check(members []int) (left []int) {
	clear(w.members)
	for _, pid := range members {
		w.members[pid] = true
		if _, ok := w.seen[pid]; !ok {
			if st, err := readStat(w.procRoot, pid); err == nil {
				w.seen[pid] = st.startTicks
			}
		}
	}
	for pid, ticks := range w.seen {
		if w.members[pid] {
			continue
		}
		st, err := readStat(w.procRoot, pid)
		if err != nil || st.startTicks != ticks || st.state == 'Z' || st.state == 'X' {
			delete(w.seen, pid) // ended (or reaped and reused)
			continue
		}
		left = append(left, pid)
	}
	return left
}

// killLeavers kills with SIGKILL the processes in left and every process
// they started since (by parent, as found in procRoot), and returns how
// many it killed.
func killLeavers(procRoot string, left []int) int {
	doomed := map[int]bool{}
	for _, pid := range left {
		doomed[pid] = true
	}
	if ents, err := os.ReadDir(procRoot); err == nil {
		parent := map[int]int{}
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				if st, err := readStat(procRoot, pid); err == nil {
					parent[pid] = st.ppid
				}
			}
		}
		for pid := range parent {
			for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
				if doomed[p] {
					doomed[pid] = true
					break
				}
			}
		}
	}
	for pid := range doomed {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	return len(doomed)
}
