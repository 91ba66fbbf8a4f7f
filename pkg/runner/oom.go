package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// OOM scores. The kernel's OOM killer kills the process with the highest
// badness: its resident memory, swap and page tables in pages, plus
// oom_score_adj × (RAM + swap) / 1000. Ordinary programs run at 0.
const (
	// BatchOOMScoreAdj is every batch process's oom_score_adj. At 1000 a
	// batch process's badness is at least the machine's size, which no
	// program at 0 can pass (its own memory is at most that): while a
	// batch process lives, the kernel kills it before any program of the
	// user, whatever their sizes, and among batches the largest first.
	// This is the kubelet's BestEffort value; its Burstable scale
	// (1000 − 1000·request/capacity, at least 2) would leave a program
	// holding more than half the machine below a batch that reserved
	// half of it, and the person at the machine comes first. A writer
	// holding CAP_SYS_RESOURCE (root, unless a container dropped it)
	// also sets the floor the batch's own user cannot lower it under
	// (oom_score_adj_min); without it the batch's user may lower it to
	// 0, never under.
	BatchOOMScoreAdj = 1000
	// ControllerOOMScoreAdj is the controller's own, where it may lower
	// it (root: CAP_SYS_RESOURCE): behind ordinary programs, so that the
	// kernel takes a user's program before the controller that would
	// otherwise have let it evict a batch, yet above system daemons
	// the kubelet puts at −999 (sshd, systemd-journald at −1000 stay
	// safer). A batch is born with it for the instant before the
	// runner raises it (see SetOOMScoreAdj).
	ControllerOOMScoreAdj = -500
)

// SetOOMScoreAdj writes adj to /proc/PID/oom_score_adj under procRoot. A
// process that ended (ESRCH, ENOENT) is not an error.
//
// Go cannot run code in the child between the fork and the exec, so the
// runner writes the leader's right after Start returns (the exec done) and
// every new member's at each sample: a process forked by the leader in
// that instant, or between two samples, holds the controller's value
// until the next sample.
func SetOOMScoreAdj(procRoot string, pid, adj int) error {
	p := filepath.Join(procRoot, strconv.Itoa(pid), "oom_score_adj")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(strconv.Itoa(adj))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return nil
	}
	return fmt.Errorf("set oom_score_adj of pid %d to %d: %w", pid, adj, err)
}

// LowerOwnOOMScoreAdj sets the calling process's oom_score_adj to
// ControllerOOMScoreAdj when it may (CAP_SYS_RESOURCE); otherwise it leaves it as it
// is and says why. It returns the value in force.
func LowerOwnOOMScoreAdj() (int, error) {
	if err := SetOOMScoreAdj("/proc", os.Getpid(), ControllerOOMScoreAdj); err != nil {
		cur, rerr := readOOMScoreAdj("/proc", os.Getpid())
		if rerr != nil {
			return 0, errors.Join(err, rerr)
		}
		return cur, err
	}
	return ControllerOOMScoreAdj, nil
}

// readOOMScoreAdj reads /proc/PID/oom_score_adj under procRoot.
func readOOMScoreAdj(procRoot string, pid int) (int, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "oom_score_adj"))
	if err != nil {
		return 0, err
	}
	n := len(b)
	for n > 0 && (b[n-1] == '\n' || b[n-1] == ' ') {
		n--
	}
	return strconv.Atoi(string(b[:n]))
}

// raiseOOM sets BatchOOMScoreAdj on the batch's processes of the last
// sample not raised yet (the leader was at its start). Each is written
// once while it stays a member; a failure is logged once.
// REQUIRES: the supervisor.
func (m *meter) raiseOOM() {
	pids := m.pids()
	if m.oomRaised == nil {
		m.oomRaised = make(map[int]bool, len(pids))
	}
	seen := make(map[int]bool, len(pids))
	for _, pid := range pids {
		seen[pid] = true
		if m.oomRaised[pid] {
			continue
		}
		if err := SetOOMScoreAdj("/proc", pid, BatchOOMScoreAdj); err != nil && !m.oomErrSeen {
			m.oomErrSeen = true
			m.b.logf("=== batch %d: %v ===", m.b.spec.BatchIndex, err)
		}
	}
	m.oomRaised = seen
}
