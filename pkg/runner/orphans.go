package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/kernfile"
)

// BatchIDEnv names the variable that marks every process of a batch: a
// value of its own per batch, inherited by whatever the batch starts
// (setsid and double forks included, unless the environment is cleared).
// Without a cgroup it is how a process that left the batch's process group
// is still found to be the batch's.
const BatchIDEnv = "LARDON3D_BATCH_ID"

// newBatchID returns a value for BatchIDEnv no other batch has.
func newBatchID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// escapees are the processes of a batch found outside its process group
// (they called setsid or setpgid), by pid with their start time (a pid is
// only theirs while the start time matches). The supervising goroutine
// adds to it; Pause and the signals read it.
type escapees struct {
	mu   sync.Mutex
	pids map[int]uint64
}

func (e *escapees) add(pid int, ticks uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pids == nil {
		e.pids = map[int]uint64{}
	}
	e.pids[pid] = ticks
}

func (e *escapees) has(pid int, ticks uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.pids[pid]
	return ok && t == ticks
}

// signal sends sig to every escapee still alive with its start time, and
// forgets those that are gone.
func (e *escapees) signal(sig unix.Signal) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for pid, ticks := range e.pids {
		if t, err := StartTicks("/proc", pid); err != nil || t != ticks {
			delete(e.pids, pid)
			continue
		}
		_ = unix.Kill(pid, sig)
	}
}

// list returns the escapees' pids.
func (e *escapees) list() map[int]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[int]uint64, len(e.pids))
	for p, t := range e.pids {
		out[p] = t
	}
	return out
}

// leaders are the batch leaders this process started and has not waited
// for yet: the orphan reaper never reaps one (its Batch does). Starting a
// batch holds the read lock from before the fork until the leader is
// registered; a reaping pass holds the write lock.
var leaders struct {
	sync.RWMutex
	pids sync.Map // pid -> struct{}
}

// AdoptOrphans makes this process a child subreaper
// (PR_SET_CHILD_SUBREAPER): a process of a batch whose parent exits is
// re-parented to the controller instead of init, so it stays in the
// controller's process tree, and the controller reaps it when it exits
// (until ctx ends). A controller without cgroups calls it once at start.
func AdoptOrphans(ctx context.Context) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a child subreaper: %w", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGCHLD)
	go func() {
		defer signal.Stop(sigs)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
				reapOrphans()
			}
		}
	}()
	return nil
}

// reapOrphans reaps every exited child of this process that it did not
// start itself: a zombie outside the controller's process group (the
// controller's own helpers, which os/exec waits for, stay in it) that is
// not a batch leader.
func reapOrphans() {
	leaders.Lock()
	defer leaders.Unlock()
	self, own := os.Getpid(), unix.Getpgrp()
	for _, pid := range childPIDs(self) {
		st, err := readStat("/proc", pid)
		if err != nil || st.state != 'Z' || st.ppid != self || st.pgrp == own {
			continue
		}
		if _, leader := leaders.pids.Load(pid); leader {
			continue
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// childPIDs lists the children of process pid, from each of its threads'
// children file.
func childPIDs(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, t := range tasks {
		b, err := kernfile.Read(t)
		if err != nil {
			continue
		}
		for _, f := range bytes.Fields(b) {
			if p, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// procStat is what the runner reads of /proc/PID/stat besides the start
// time.
type procStat struct {
	state      byte
	ppid, pgrp int
	startTicks uint64
	kernel     bool // a kernel thread (PF_KTHREAD): no user space, no environment
}

// pfKthread is the kernel's PF_KTHREAD in the flags of /proc/PID/stat.
const pfKthread = 0x00200000

// readStat reads a process's state, parent, group, start time and
// whether it is a kernel thread.
func readStat(procRoot string, pid int) (procStat, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), "stat")
	data, err := kernfile.Read(path)
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("%s: no command field", path)
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("%s: %d fields after the command, want at least 20", path, len(f))
	}
	var st procStat
	st.state = f[0][0]
	if st.ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return procStat{}, fmt.Errorf("%s: parent: %w", path, err)
	}
	if st.pgrp, err = strconv.Atoi(string(f[2])); err != nil {
		return procStat{}, fmt.Errorf("%s: group: %w", path, err)
	}
	if st.startTicks, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return procStat{}, fmt.Errorf("%s: start time: %w", path, err)
	}
	if flags, err := strconv.ParseUint(string(f[6]), 10, 64); err == nil {
		st.kernel = flags&pfKthread != 0
	}
	return st, nil
}

// carriesMarker reports whether the process's environment holds entry
// ("NAME=VALUE"); false when it cannot be read (another user's process).
func carriesMarker(procRoot string, pid int, entry []byte) bool {
	carries, _ := readsMarker(procRoot, pid, entry)
	return carries
}

// readsMarker is carriesMarker that also says whether the environment
// read had anything in it: a process between an execve's new memory and
// its new environment shows none for a moment.
func readsMarker(procRoot string, pid int, entry []byte) (carries, nonEmpty bool) {
	env, err := kernfile.Read(filepath.Join(procRoot, strconv.Itoa(pid), "environ"))
	if err != nil {
		return false, true // unreadable is another user's, not a moment of an execve
	}
	want := make([]byte, 0, len(entry)+2)
	want = append(append(append(want, 0), entry...), 0)
	return bytes.HasPrefix(env, want[1:]) || bytes.Contains(env, want), len(env) > 0
}
