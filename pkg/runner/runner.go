package runner

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/kernfile"
)

// pauseWait bounds how long Pause waits for every process to stop.
const pauseWait = 5 * time.Second

// Batch is a batch in flight: one command run as its own process group.
// Its methods are safe for concurrent use.
type Batch struct {
	spec    Spec
	fs      procfs.FS
	cmd     *exec.Cmd
	group   ProcessGroup
	started time.Time
	// out writes the log; outR is the read end of the output pipe.
	out  *outputCopier
	outR *os.File
	// lastCount is the progress count last told to Spec.OnProgress.
	lastCount int64
	itemsFile string
	// runAs is the user the command is switched to; nil when it runs with
	// the controller's own credentials.
	runAs *User
	// cg is the batch's control group; nil when it runs under the sampler
	// alone.
	cg *cgroup.Group
	// batchID is the batch's BatchIDEnv value; esc, without a cgroup, the
	// processes found to be the batch's outside its process group.
	batchID string
	esc     escapees
	// rss is the batch's memory at the last sample: its cgroup's working
	// set, or the group's resident memory.
	rss        atomic.Int64
	cancelOnce sync.Once
	cancelCh   chan struct{} // closed by Cancel
	killCh     chan struct{} // closed by Kill
	killOnce   sync.Once
	wake       chan struct{} // buffered(1): the pause state changed
	ended      chan struct{} // closed once result is set
	done       chan struct{} // closed once the cgroup is handed back too
	result     Result

	// opMu serializes Pause and Resume, and the batch's end with them; it
	// is taken before mu.
	opMu sync.Mutex
	// mu guards the pause accounting; held only briefly.
	mu struct {
		sync.Mutex
		paused      bool
		pausedSince time.Time
		pausedTotal time.Duration
	}
}

// Start writes the items file, appends a header to the log, and starts the
// command of s as a new process group, with its memory watched and its
// timeout armed. The batch is cancelled, as by Cancel, when ctx ends.
//
// An error means nothing was started; a command that cannot be found or run
// gives an error wrapping ErrCommandNotFound, also written to the log.
func Start(ctx context.Context, s Spec) (*Batch, error) {
	s, err := s.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start batch %d of %s: %w", s.BatchIndex, s.Task, err)
	}
	runAs, err := switchUser(s.User)
	if err != nil {
		return nil, fmt.Errorf("start batch %d of %s: %w", s.BatchIndex, s.Task, err)
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, fmt.Errorf("open procfs: %w", err)
	}
	if runAs != nil && runAs.UID != 0 {
		// Root opens the log by path (O_CREATE, following a link): a
		// directory only the controller can change.
		if err := checkControllerOnly(filepath.Dir(s.LogPath), "log directory"); err != nil {
			return nil, fmt.Errorf("start batch %d of %s: %w", s.BatchIndex, s.Task, err)
		}
	}
	itemsFile, err := writeItems(s, runAs)
	if err != nil {
		return nil, err
	}
	out, err := newOutputCopier(s.LogPath, s.LogMaxBytes, s.BatchSize())
	if err != nil {
		s.Spares.put(itemsFile)
		return nil, NewPrepareError(fmt.Errorf("start batch %d of %s: open log: %w", s.BatchIndex, s.Task, err))
	}
	b := &Batch{
		spec: s, fs: fs, out: out, itemsFile: itemsFile, runAs: runAs, lastCount: -1,
		cancelCh: make(chan struct{}), killCh: make(chan struct{}), wake: make(chan struct{}, 1), ended: make(chan struct{}), done: make(chan struct{}),
	}
	b.logf("=== batch %d items %s threads %d memory %s attempt %d at %s ===",
		s.BatchIndex, itemRange(s), s.Threads, memoryText(s.MemoryLimit), s.Attempt,
		time.Now().Format(time.RFC3339))
	if runAs != nil {
		b.logf("=== batch %d runs as uid %d gid %d groups %v%s ===", s.BatchIndex, runAs.UID, runAs.GID, runAs.Groups, userName(runAs))
		if why := searchProblem(filepath.Dir(itemsFile), runAs); why != "" {
			b.logf("=== batch %d: the items file may be out of its reach: %s ===", s.BatchIndex, why)
		}
	}
	fail := func(err error) (*Batch, error) {
		b.logf("=== batch %d could not start: %v ===", s.BatchIndex, err)
		out.close()
		_ = os.Rename(itemsFile, filepath.Join(s.RunDir, itemsFileName(s.Task, s.BatchIndex))) // kept, out of the pool
		if b.cg != nil {
			_, _ = b.cg.Kill(time.Second)
			_ = b.cg.Remove()
		}
		return nil, fmt.Errorf("start batch %d of %s: %w", s.BatchIndex, s.Task, err)
	}
	if s.Cgroup != nil {
		// Below the floor a reused group's residue would count in the
		// working set held to the contract: a fresh group then.
		v := s.Cgroup.Version()
		cg, err := s.Cgroup.New(cgroupName(s), cgroup.Limits{MemoryMax: s.kernelLimit(v), MemorySoft: s.MemoryLimit, PidsMax: s.PidsMax, Fresh: s.belowFloor(v)})
		if err != nil {
			_, err := fail(fmt.Errorf("create the batch's cgroup: %w", err))
			return nil, NewPrepareError(err)
		}
		b.cg = cg
		b.logf("=== batch %d in cgroup v%d %s, memory limit %s ===", s.BatchIndex, s.Cgroup.Version(), cg.Dir(),
			memoryText(s.kernelLimit(s.Cgroup.Version())))
	}
	// One pipe for the output: the copier is the log's only writer.
	r, w, err := os.Pipe()
	if err != nil {
		_, err := fail(fmt.Errorf("output pipe: %w", err))
		return nil, NewPrepareError(err)
	}
	b.outR = r
	err = b.start(w)
	_ = w.Close() // the batch's processes hold it now
	if err != nil {
		_ = r.Close()
		return fail(err)
	}
	go out.run(r)
	leaderExited := make(chan struct{})
	go waitLeader(b.cmd.Process.Pid, leaderExited)
	go b.supervise(ctx, leaderExited)
	return b, nil
}

// start resolves and launches the command.
func (b *Batch) start(output *os.File) error {
	s := b.spec
	env, argv, err := buildEnv(baseEnv(b.runAs, os.Geteuid(), os.Environ()), s, b.itemsFile)
	if err != nil {
		return err
	}
	b.batchID = newBatchID()
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, BatchIDEnv+"=") })
	env = append(env, BatchIDEnv+"="+b.batchID)
	// Looked up as the batch's user (AsUser): a root controller tells a
	// user nothing of paths the user cannot reach.
	var path string
	err = AsUser(b.runAs, func() error {
		if s.WorkingDir != "" {
			if fi, err := os.Stat(s.WorkingDir); err != nil {
				return fmt.Errorf("working directory: %w", err)
			} else if !fi.IsDir() {
				return fmt.Errorf("working directory %s: not a directory", s.WorkingDir)
			}
		}
		var err error
		path, err = LookPath(argv[0], envValue(env, "PATH"), s.WorkingDir)
		return err
	})
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   argv,
		Env:    env,
		Dir:    s.WorkingDir,
		Stdout: output,
		Stderr: output,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid: true,
			// Go's forkExec sets it after the credentials change (which
			// would clear it) and checks the parent is still there.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if b.runAs != nil {
		cmd.SysProcAttr.Credential = b.runAs.credential()
	}
	// The batch gets its output and nothing else the controller holds.
	if err := CloseOnExecInherited(); err != nil {
		return err
	}
	leaders.RLock() // no orphan reaping between the fork and the registration
	err = launch(cmd, s.CPUs, b.cg, b.logf)
	if err == nil {
		leaders.pids.Store(cmd.Process.Pid, struct{}{})
	}
	leaders.RUnlock()
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) && (errno == syscall.ENOENT || errno == syscall.EACCES || errno == syscall.ENOEXEC) {
			// execve refused a file that exists: a bad or missing
			// interpreter (#!), a binary for another machine, no
			// permission on the way.
			if b.runAs != nil {
				msg := fmt.Sprintf("command %q cannot be executed as uid %d: %v", argv[0], b.runAs.UID, errno)
				if s.WorkingDir != "" && errno == syscall.EACCES {
					if why := searchProblem(s.WorkingDir, b.runAs); why != "" {
						msg += " (working directory: " + why + ")"
					}
				}
				return notFoundError(msg)
			}
			return notFoundError(fmt.Sprintf("command %q cannot be executed: %v", argv[0], errno))
		}
		return err
	}
	b.cmd = cmd
	b.started = time.Now()
	pid := cmd.Process.Pid
	// Ahead of the user's programs for the kernel's OOM killer (see
	// BatchOOMScoreAdj); its children inherit it from now on.
	if err := SetOOMScoreAdj("/proc", pid, BatchOOMScoreAdj); err != nil {
		b.logf("=== batch %d: %v ===", s.BatchIndex, err)
	}
	b.group = ProcessGroup{PGID: pid, BootID: bootID()}
	if b.cg != nil {
		ref := b.cg.Ref()
		b.group.Cgroup = &ref
	}
	// The leader is not reaped before the group is empty (see supervise),
	// so its stat is readable here even if it already exited.
	if ticks, err := StartTicks(procfs.DefaultMountPoint, pid); err == nil {
		b.group.StartTicks = ticks
	} else {
		b.logf("=== batch %d: cannot read the start time of pid %d: %v ===", s.BatchIndex, pid, err)
	}
	return nil
}

// launch starts cmd so that the child is bound from its first instruction:
// inside the batch's cgroup (v2: cloned into it; v1: forked by a thread
// that entered it for the fork) and with the CPU affinity cpus (set on the
// forking thread). The thread is restored after the fork. The Go runtime
// does not create threads from a locked thread, so no other thread
// inherits the temporary state. When the affinity cannot be set, the
// command starts unbound and the log says why; a cgroup that cannot be
// entered is an error (the contract would not hold).
func launch(cmd *exec.Cmd, cpus []int, cg *cgroup.Group, logf func(string, ...any)) error {
	var want unix.CPUSet
	for _, c := range cpus {
		if c >= 0 {
			want.Set(c)
		}
	}
	if len(cpus) > 0 && want.Count() == 0 {
		logf("=== cpu affinity %v not applied: no valid cpu ===", cpus)
	}
	enterThread := cg != nil && cg.FD() < 0
	if cg != nil && cg.FD() >= 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cg.FD()
	}
	if want.Count() == 0 && !enterThread {
		return startInto(cmd, cg, logf)
	}
	runtime.LockOSThread()
	var restoreAffinity func() error
	if want.Count() > 0 {
		var old unix.CPUSet
		err := unix.SchedGetaffinity(0, &old)
		if err == nil {
			err = unix.SchedSetaffinity(0, &want)
		}
		if err != nil {
			logf("=== cpu affinity %v not applied: %v ===", cpus, err)
		} else {
			restoreAffinity = func() error { return unix.SchedSetaffinity(0, &old) }
		}
	}
	var leave func() error
	if enterThread {
		var err error
		if leave, err = cg.EnterThread(); err != nil {
			if restoreAffinity == nil || restoreAffinity() == nil {
				runtime.UnlockOSThread()
			}
			return err
		}
	}
	err := cmd.Start()
	var restoreErr error
	if leave != nil {
		if lerr := leave(); lerr != nil {
			restoreErr = fmt.Errorf("leave the batch's cgroup: %w", lerr)
		}
	}
	if restoreAffinity != nil {
		if rerr := restoreAffinity(); rerr != nil {
			restoreErr = errors.Join(restoreErr, fmt.Errorf("restore cpu affinity: %w", rerr))
		}
	}
	if restoreErr != nil {
		// Keep the thread locked: the goroutine's end then retires it
		// rather than let other goroutines run on a thread left in the
		// batch's cgroup or narrowed. The child's parent-death signal
		// follows the thread, so kill the child rather than leave it to
		// die at random.
		if err == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return restoreErr
	}
	runtime.UnlockOSThread()
	return err
}

// startInto starts cmd; on a kernel that cannot clone into a cgroup
// (before Linux 5.7) it starts the command plainly and moves it into the
// cgroup at once, which the log says.
func startInto(cmd *exec.Cmd, cg *cgroup.Group, logf func(string, ...any)) error {
	err := cmd.Start()
	if err == nil || cg == nil || !cmd.SysProcAttr.UseCgroupFD ||
		!(errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.E2BIG) || errors.Is(err, unix.EINVAL)) {
		return err
	}
	logf("=== cannot start inside the cgroup (%v): started, then moved in ===", err)
	// An exec.Cmd starts once, even after a failed Start: a fresh one.
	attr := *cmd.SysProcAttr
	attr.UseCgroupFD = false
	*cmd = exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr, ExtraFiles: cmd.ExtraFiles, SysProcAttr: &attr}
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := cg.Attach(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("move the command into its cgroup: %w", err)
	}
	return nil
}

// cgroupName names a batch's cgroup: the task, the batch, the attempt and
// a random suffix (two generations of a task may run a batch of the same
// index at once while the older one ends).
func cgroupName(s Spec) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%s-b%d-a%d-%x", s.Task, s.BatchIndex, s.Attempt, r)
}

// waitLeader closes exited when pid has exited, without reaping it: the
// zombie keeps the pid and the group id from being reused while the rest of
// the group is killed. It waits in Go's poller on a pidfd where the kernel
// has them (Linux 5.4), else in waitid.
func waitLeader(pid int, exited chan<- struct{}) {
	defer close(exited)
	if pollLeader(pid) {
		return
	}
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// pollLeader waits until pid has exited, without reaping it, on a pidfd
// in Go's poller: no thread sits blocked in waitid for the batch's life,
// which the scheduler would take the thread's processor from and hand it
// back after (a thread woken and one put to sleep per batch). False when
// the kernel has no pidfd or the poller cannot take it: wait in waitid.
func pollLeader(pid int) bool {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.EINVAL) { // before Linux 5.10: no PIDFD_NONBLOCK
		if fd, err = unix.PidfdOpen(pid, 0); err == nil {
			if err = unix.SetNonblock(fd, true); err != nil {
				_ = unix.Close(fd)
			}
		}
	}
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), "pidfd") // non-blocking: in the poller
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var waitErr error
	err = rc.Read(func(uintptr) bool {
		var info unix.Siginfo
		waitErr = unix.EINTR
		for errors.Is(waitErr, unix.EINTR) { // at once: the poller tells an exit once
			waitErr = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
		}
		// A waitable child reports SIGCHLD; none yet leaves it 0.
		return waitErr != nil || info.Signo == int32(unix.SIGCHLD)
	})
	// An error of waitid itself (no P_PIDFD before Linux 5.4): the
	// caller's waitid decides. ECHILD: reaped already, it exited.
	return err == nil && (waitErr == nil || errors.Is(waitErr, unix.ECHILD))
}

// supervise owns the batch from start to end: it samples memory, enforces
// the limit (the kernel does, in a cgroup; the sampler does without one)
// and the timeout, handles cancel, and after the leader exits kills what is
// left of the batch, reaps the leader and sets the result.
func (b *Batch) supervise(ctx context.Context, leaderExited <-chan struct{}) {
	defer close(b.done)
	s := b.spec
	m := newMeter(b)
	ceiling := s.memoryCeiling()
	var (
		reason, msg string
		terminating bool
		graceC      <-chan time.Time
		timeoutC    <-chan time.Time
		timeout     *time.Timer
		memKilled   bool
	)
	setReason := func(r, m string) {
		if reason == "" {
			reason, msg = r, m
		}
	}
	killAll := func() {
		_ = signalGroup(b.group.PGID, unix.SIGKILL)
		b.esc.signal(unix.SIGKILL)
		if b.cg != nil {
			b.cg.KillAll()
		}
	}
	memoryKill := func(m string) {
		if !memKilled {
			memKilled = true
			setReason(ReasonMemoryExceeded, m)
			killAll()
		}
	}
	terminate := func() {
		if terminating {
			return
		}
		terminating = true
		if b.cg != nil {
			_ = b.cg.Thaw() // a frozen process must run to handle SIGTERM
			_, _ = b.cg.Signal(unix.SIGTERM)
			_, _ = b.cg.Signal(unix.SIGCONT)
		}
		_ = signalGroup(b.group.PGID, unix.SIGTERM)
		_ = signalGroup(b.group.PGID, unix.SIGCONT) // a stopped process must run to handle SIGTERM
		b.esc.signal(unix.SIGTERM)
		b.esc.signal(unix.SIGCONT)
		graceC = time.After(s.KillGrace)
	}
	vram := newVRAMWatch(s)
	var leavers *leaverWatch
	if b.cg != nil {
		leavers = newLeaverWatch(procfs.DefaultMountPoint, b.cmd.Process.Pid, b.group.StartTicks)
	}
	check := func() {
		m.sample()
		b.pollProgress()
		if leavers != nil {
			if left := leavers.check(m.members); len(left) > 0 {
				n := killLeavers(procfs.DefaultMountPoint, left)
				setReason(ReasonLeftCgroup, fmt.Sprintf("pid %v moved out of the batch's cgroup, where its contract is held: killed with %d processes it started, and the batch with them", left, n-len(left)))
				b.logf("=== batch %d: pid %v left its cgroup: killed, and the batch ===", s.BatchIndex, left)
				killAll()
				leavers = nil
			}
		}
		if vram != nil && !memKilled {
			used, note := vram.check(m.pids())
			if note != "" {
				b.logf("=== batch %d: %s ===", s.BatchIndex, note)
			}
			if used > 0 {
				memKilled = true
				setReason(ReasonGPUMemoryExceeded, gpuExceededMessage(s, used))
				killAll()
			}
		}
		switch {
		case m.oomKills > 0:
			memoryKill(b.kernelKillMessage())
		case b.cg == nil && ceiling > 0 && m.peak > ceiling:
			memoryKill(fmt.Sprintf("peak %s exceeded the contract %s by more than %s",
				governor.FormatBytes(m.peak), governor.FormatBytes(s.MemoryLimit), percent(s.MemoryTolerance)))
		case b.cg != nil && s.belowFloor(b.cg.Ref().Version) && m.peakWorkingSet > ceiling:
			// A contract below the kernel's floor: the sampler holds it.
			memoryKill(fmt.Sprintf("working set %s exceeded the contract %s by more than %s",
				governor.FormatBytes(m.peakWorkingSet), governor.FormatBytes(s.MemoryLimit), percent(s.MemoryTolerance)))
		}
	}
	armTimeout := func() {
		if s.Timeout <= 0 {
			return
		}
		if timeout != nil {
			timeout.Stop()
		}
		timeoutC = nil
		b.mu.Lock()
		paused, pausedTotal := b.mu.paused, b.mu.pausedTotal
		b.mu.Unlock()
		if paused {
			return
		}
		timeout = time.NewTimer(time.Until(b.started.Add(s.Timeout + pausedTotal)))
		timeoutC = timeout.C
	}
	armTimeout()
	ticker := time.NewTicker(s.SampleInterval)
	defer ticker.Stop()
	ctxDone, cancelCh, killCh := ctx.Done(), b.cancelCh, b.killCh
	if b.cg == nil {
		// The first scan marks the processes outside the group. A cgroup
		// needs no reading at the start: the kernel's peak covers it.
		m.sample()
	}
loop:
	for {
		select {
		case <-leaderExited:
			break loop
		case <-ticker.C:
			check()
		case <-b.wake:
			armTimeout()
		case <-timeoutC:
			timeoutC = nil
			b.mu.Lock()
			deadline := b.started.Add(s.Timeout + b.mu.pausedTotal)
			b.mu.Unlock()
			if !timedOutByItsClock(b.cmd.Process.Pid, deadline, time.Now()) {
				continue // it ended by itself, in time: leaderExited tells
			}
			setReason(ReasonBatchTimeout, fmt.Sprintf("ran longer than the batch timeout %v", s.Timeout))
			terminate()
		case <-cancelCh:
			cancelCh = nil
			setReason(ReasonCancelled, "cancelled")
			terminate()
		case <-killCh:
			killCh = nil
			setReason(ReasonCancelled, "killed")
			killAll()
		case <-ctxDone:
			ctxDone = nil
			setReason(ReasonCancelled, fmt.Sprintf("cancelled: %v", context.Cause(ctx)))
			terminate()
		case <-graceC:
			graceC = nil
			killAll()
		}
	}
	if timeout != nil {
		timeout.Stop()
	}
	// A supervisor that noticed the exit late (the controller was
	// stopped) reports the batch's end by the batch's clock.
	var stall time.Duration
	if _, ago, known := leaderExitedAgo(b.cmd.Process.Pid); known && ago > stallSlack {
		stall = ago
	}
	// The leader has exited but is not reaped: kill the rest of the batch
	// (its cgroup, whatever session a process moved to; its process group
	// without one) and wait until no live process remains.
	stragglers := -1
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		live := m.live()
		if live < 0 { // cannot see the group: fall back to a full scan
			ms, err := groupMembers(b.fs, b.group.PGID)
			if err != nil {
				break
			}
			live = 0
			for _, m := range ms {
				if !m.gone() {
					live++
				}
			}
		}
		if stragglers < 0 {
			stragglers = live
		}
		if live == 0 {
			break
		}
		killAll()
		time.Sleep(wait)
	}
	// Every process is gone: what they wrote reaches the log before the
	// end is told.
	b.out.drain(b.outR)
	_ = b.outR.Close()
	b.pollProgress()
	waitErr := b.cmd.Wait()
	leaders.pids.Delete(b.cmd.Process.Pid)
	ended := time.Now().Add(-stall)
	m.final()
	if st := b.cmd.ProcessState; m.cpu == 0 && st != nil {
		m.cpu = st.UserTime() + st.SystemTime()
	}
	if m.oomKills > 0 && !memKilled {
		memKilled = true
		// The kernel's kill may have ended the leader itself, before any
		// sample saw it: the reason is memory, not the signal.
		reason, msg = ReasonMemoryExceeded, b.kernelKillMessage()
	}

	res := Result{Reason: reason, Message: msg, Stragglers: stragglers, Started: b.started, Ended: ended, ExitCode: -1}
	if st := b.cmd.ProcessState; st != nil {
		res.ExitCode = st.ExitCode()
		// Not the leader's ru_maxrss: it keeps the high-water mark of the
		// controller's own image, shared before exec, so every short command
		// would report the controller's size. The peak is the kernel's or
		// what was sampled.
		if res.Message == "" {
			switch ws, ok := st.Sys().(syscall.WaitStatus); {
			case ok && ws.Signaled():
				res.Message = fmt.Sprintf("killed by signal %v", ws.Signal())
			case res.ExitCode != 0:
				res.Message = fmt.Sprintf("exited with code %d", res.ExitCode)
			}
		}
	} else if res.Message == "" && waitErr != nil {
		res.Message = fmt.Sprintf("wait: %v", waitErr)
	}
	res.PeakMemoryBytes, res.PeakWorkingSetBytes = m.peak, m.peakWorkingSet
	res.OOMKills, res.CPUTime, res.Enforcement = m.oomKills, m.cpu, "sampler"
	res.PeakGPUMemoryBytes, res.GPUMemoryMeasured = vram.peakBytes()
	if b.cg != nil {
		res.Enforcement = fmt.Sprintf("cgroup v%d %s", b.cg.Ref().Version, b.cg.Dir())
	}
	if stragglers > 0 {
		where := "group"
		if b.cg != nil {
			where = "cgroup"
		}
		b.logf("=== batch %d: killed %d processes left in the %s after the leader exited ===", s.BatchIndex, stragglers, where)
	}
	end := fmt.Sprintf("exit code %d", res.ExitCode)
	if res.Reason != "" {
		end = res.Reason + ": " + res.Message
	} else if res.Message != "" {
		end = res.Message
	}
	peakText := "peak memory " + governor.FormatBytes(m.peak)
	if b.cg != nil {
		peakText += ", working set " + governor.FormatBytes(m.peakWorkingSet)
	}
	if res.GPUMemoryMeasured {
		peakText += ", GPU memory " + governor.FormatBytes(res.PeakGPUMemoryBytes)
	}
	b.logf("=== batch %d ended: %s after %v, %s ===", s.BatchIndex, end,
		ended.Sub(b.started).Round(time.Millisecond), peakText)
	b.out.close()
	switch kept := filepath.Join(s.RunDir, itemsFileName(s.Task, s.BatchIndex)); {
	case res.ExitCode == 0 && res.Reason == "":
		s.Spares.put(b.itemsFile)
		if kept != b.itemsFile {
			_ = os.Remove(kept) // what a failed attempt kept is obsolete now
		}
	case kept != b.itemsFile:
		// Kept for a look, out of the pool, under the batch's own name.
		if err := os.Rename(b.itemsFile, kept); err == nil {
			b.itemsFile = kept
		}
	}
	b.result = res
	// The result is out before the cgroup, empty now, is handed back for
	// reuse or removed: that is off the path to the next batch (Done waits
	// for it). Under opMu: a Pause that saw the batch running has frozen
	// the group by then (and Recycle does not keep a group once frozen),
	// a later one sees it ended.
	b.opMu.Lock()
	close(b.ended)
	b.opMu.Unlock()
	if b.cg != nil {
		var notes []string
		if err := b.cg.Recycle(); err != nil {
			notes = append(notes, err.Error())
		}
		if b.mayLeaveCgroup() {
			// A process that left the cgroup before any sample saw it
			// still carries the batch's mark: off the path to the next
			// batch, nothing of this one is left running. Its pid comes
			// after the leader's (unless the kernel's pids wrapped
			// round meanwhile, which pidsAfter sees): the machine's
			// older processes are not even listed (BenchmarkMarkScan).
			if n, _ := killByEnv(procfs.DefaultMountPoint, BatchIDEnv+"="+b.batchID, b.cmd.Process.Pid); n > 0 {
				notes = append(notes, fmt.Sprintf("killed %d processes that had left the cgroup", n))
			}
		}
		for _, n := range notes {
			if f, ferr := kernfile.OpenFile(s.LogPath, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0); ferr == nil {
				_, _ = fmt.Fprintf(f, "=== batch %d: %s ===\n", s.BatchIndex, n)
				_ = f.Close()
			}
		}
	}
}

// mayLeaveCgroup reports whether the batch's processes may write into the
// cgroup files the controller uses: they run as root, or as the
// controller's own user (whose delegated cgroups are theirs).
func (b *Batch) mayLeaveCgroup() bool {
	if b.runAs == nil {
		return true
	}
	return b.runAs.UID == 0 || int64(b.runAs.UID) == int64(os.Geteuid())
}

// kernelKillMessage says that the kernel killed a process of the batch at
// its cgroup's limit, with the numbers.
func (b *Batch) kernelKillMessage() string {
	s := b.spec
	limit, ceiling := s.kernelLimit(b.cg.Ref().Version), s.memoryCeiling()
	if limit > ceiling {
		return fmt.Sprintf("the kernel killed it at its limit %s (the smallest a batch's cgroup gets; the contract is %s)",
			governor.FormatBytes(limit), governor.FormatBytes(s.MemoryLimit))
	}
	return fmt.Sprintf("the kernel killed it at its limit %s (the contract %s plus %s)",
		governor.FormatBytes(limit), governor.FormatBytes(s.MemoryLimit), percent(s.MemoryTolerance))
}

// meter takes a batch's memory readings: from its cgroup when it has one,
// else by summing the resident memory of its process group. Used by the
// supervisor only.
type meter struct {
	b       *Batch
	sampler *groupSampler
	errSeen bool
	// peak is the kernel's peak charge (cgroup), or the highest RSS sum.
	peak int64
	// peakWorkingSet is the highest working set sampled.
	peakWorkingSet int64
	oomKills       int64
	cpu            time.Duration
	// members are the cgroup's live processes at the last sample.
	members []int
	// oomRaised are the processes given BatchOOMScoreAdj (raiseOOM).
	oomRaised  map[int]bool
	oomErrSeen bool
}

func newMeter(b *Batch) *meter {
	m := &meter{b: b}
	if b.cg == nil {
		m.sampler = newGroupSampler(b.fs, b.group.PGID)
		m.sampler.esc, m.sampler.procRoot, m.sampler.since = &b.esc, procfs.DefaultMountPoint, b.group.StartTicks
		m.sampler.marker = []byte(BatchIDEnv + "=" + b.batchID)
	}
	return m
}

// sample reads the memory now and returns the number of live processes,
// -1 when they cannot be counted.
func (m *meter) sample() int {
	if m.b.cg == nil {
		rss, live, err := m.sampler.sample()
		if err != nil {
			m.failed(err)
			return -1
		}
		m.peak = max(m.peak, rss)
		m.peakWorkingSet = m.peak
		m.b.rss.Store(rss)
		m.raiseOOM()
		return live
	}
	ms, err := m.b.cg.Memory()
	if err != nil {
		m.failed(err)
	} else {
		m.note(ms)
		m.b.rss.Store(ms.WorkingSet)
	}
	live, err := m.b.cg.Live()
	if err != nil {
		m.failed(err)
		return -1
	}
	m.members = live
	m.raiseOOM()
	return len(live)
}

// pids are the batch's processes at the last sample: its cgroup's
// members, else those of its process group and the processes that left it.
func (m *meter) pids() []int {
	if m.b.cg != nil {
		return m.members
	}
	return slices.Collect(maps.Keys(m.sampler.members))
}

// live returns the number of live processes, -1 when they cannot be
// counted: the cgroup's members (final takes its memory readings once
// they are gone), else a sample of the group.
func (m *meter) live() int {
	if m.b.cg == nil {
		return m.sample()
	}
	live, err := m.b.cg.Live()
	if err != nil {
		m.failed(err)
		return -1
	}
	return len(live)
}

func (m *meter) note(ms cgroup.MemoryStats) {
	m.peak = max(m.peak, ms.Peak, ms.Usage)
	m.peakWorkingSet = max(m.peakWorkingSet, ms.WorkingSet)
	m.oomKills = max(m.oomKills, ms.OOMKills)
}

// final takes the last readings once every process has ended: the kernel's
// peak and OOM count cover what no sample saw.
func (m *meter) final() {
	if m.b.cg == nil {
		return
	}
	if ms, err := m.b.cg.PeakMemory(); err == nil {
		m.peak = max(m.peak, ms.Peak)
		m.oomKills = max(m.oomKills, ms.OOMKills)
		// Every process has ended: what is still charged is page cache.
		// The peak less that cache estimates the working set at the peak
		// (it errs high when cache was reclaimed before the end), and
		// catches a burst between two samples; the need is the higher of
		// the two estimates.
		m.peakWorkingSet = max(m.peakWorkingSet, m.peak-ms.File)
	}
	m.peakWorkingSet = min(m.peakWorkingSet, m.peak)
	if d, ok := m.b.cg.CPUTime(); ok {
		m.cpu = d
	}
}

func (m *meter) failed(err error) {
	if !m.errSeen {
		m.errSeen = true
		m.b.logf("=== batch %d: memory sampling failed: %v ===", m.b.spec.BatchIndex, err)
	}
}

// pollProgress tells Spec.OnProgress the count the output copier last
// found in the command's output, when it changed.
func (b *Batch) pollProgress() {
	n := b.out.count()
	if n == b.lastCount {
		return
	}
	b.lastCount = n
	if b.spec.OnProgress != nil {
		b.spec.OnProgress(n)
	}
}

// Group returns the batch's process group, to be recorded so that a
// restarted controller can kill what a crashed one left (KillLeftover).
func (b *Batch) Group() ProcessGroup { return b.group }

// MemoryBytes returns the group's resident memory at the last sample (0
// before the first one and after the batch ended).
func (b *Batch) MemoryBytes() int64 {
	if b.hasEnded() {
		return 0
	}
	return b.rss.Load()
}

// ItemsFile returns the path of the file listing the batch's items. Once
// the batch succeeded it is gone (or, with Spec.Spares, a pool file a later
// batch rewrites); once it failed, the path is TASK.batch-INDEX.items,
// kept.
func (b *Batch) ItemsFile() string { return b.itemsFile }

// Pause stops every process of the batch and returns once each of them is
// stopped: in a cgroup with a freezer, the kernel freezes the cgroup (every
// member, whatever its session; the processes do not see a signal);
// otherwise every process of the group gets SIGSTOP and Pause waits for the
// stopped state in procfs (a process that forks during the pause is
// stopped too; one in uninterruptible sleep that was sent SIGSTOP counts
// as stopped). Paused time does not count against the timeout.
func (b *Batch) Pause() error {
	b.opMu.Lock()
	defer b.opMu.Unlock()
	if b.hasEnded() {
		return ErrBatchEnded
	}
	markPaused := func() {
		b.mu.Lock()
		if !b.mu.paused {
			b.mu.paused = true
			b.mu.pausedSince = time.Now()
			b.notify()
		}
		b.mu.Unlock()
	}
	if b.cg != nil && b.cg.CanFreeze() {
		if err := b.cg.Freeze(pauseWait); err != nil {
			if b.hasEnded() {
				return ErrBatchEnded // the cgroup went with the batch
			}
			return fmt.Errorf("%w: %v", ErrPauseTimeout, err)
		}
		markPaused()
		return nil
	}
	pgid := b.group.PGID
	if err := signalGroup(pgid, unix.SIGSTOP); err != nil {
		return err
	}
	b.esc.signal(unix.SIGSTOP)
	markPaused()
	deadline := time.Now().Add(pauseWait)
	// A process is held once stopped ('T'), or once in uninterruptible
	// sleep ('D') after this loop sent it SIGSTOP: it stops on its way back
	// to user space, before an instruction of its own. A vfork parent
	// whose child stopped before its exec waits in 'D' until the child
	// goes on, and cannot reach 'T' before Resume. (The group's signal
	// above may have come before a process's fork, hence the loop's own.)
	type proc struct {
		pid   int
		ticks uint64
	}
	sent := map[proc]bool{}
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		ms, err := groupMembers(b.fs, pgid)
		if err != nil {
			return err
		}
		var running []int
		stop := func(pid int, ticks uint64, state byte) {
			p := proc{pid, ticks}
			if stoppedState(state) || (state == 'D' && sent[p]) {
				return
			}
			running = append(running, pid)
			_ = unix.Kill(pid, unix.SIGSTOP)
			sent[p] = true
		}
		for _, m := range ms {
			if !m.gone() {
				state := byte(0)
				if m.state != "" {
					state = m.state[0]
				}
				stop(m.pid, m.startTicks, state)
			}
		}
		for pid, ticks := range b.esc.list() {
			if st, err := readStat(procfs.DefaultMountPoint, pid); err == nil && st.startTicks == ticks &&
				st.state != 'Z' && st.state != 'X' {
				stop(pid, ticks, st.state)
			}
		}
		if len(running) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: processes %v of group %d", ErrPauseTimeout, running, pgid)
		}
		time.Sleep(wait)
	}
}

// Resume thaws the batch's cgroup, or continues the group with SIGCONT.
func (b *Batch) Resume() error {
	b.opMu.Lock()
	defer b.opMu.Unlock()
	if b.hasEnded() {
		return ErrBatchEnded
	}
	if b.cg != nil && b.cg.CanFreeze() {
		if err := b.cg.Thaw(); err != nil {
			if b.hasEnded() {
				return ErrBatchEnded
			}
			return err
		}
	} else {
		if err := signalGroup(b.group.PGID, unix.SIGCONT); err != nil {
			return err
		}
		b.esc.signal(unix.SIGCONT)
	}
	b.mu.Lock()
	if b.mu.paused {
		b.mu.paused = false
		b.mu.pausedTotal += time.Since(b.mu.pausedSince)
		b.notify()
	}
	b.mu.Unlock()
	return nil
}

// Cancel terminates the batch: SIGTERM (and SIGCONT) to the group, SIGKILL
// after the grace period. It does not wait; Wait does. Calling it again, or
// after the end, does nothing.
func (b *Batch) Cancel() {
	b.cancelOnce.Do(func() { close(b.cancelCh) })
}

// Kill ends the batch at once: SIGKILL to every process of its cgroup
// and group (a frozen cgroup thawed), with no grace, as an eviction
// needs when the memory runs out. It returns at once; Wait tells the end.
func (b *Batch) Kill() {
	b.killOnce.Do(func() { close(b.killCh) })
}

// Wait blocks until the leader has exited and no live process of the group
// remains, and returns how the batch ended. The batch's cgroup, empty, may
// still be being recycled or removed (Done).
func (b *Batch) Wait() Result {
	<-b.ended
	return b.result
}

// Done is closed once the batch has ended (Wait returns at once) and its
// cgroup is removed or kept for a later batch (cgroup.Group.Recycle).
func (b *Batch) Done() <-chan struct{} { return b.done }

func (b *Batch) hasEnded() bool {
	select {
	case <-b.ended:
		return true
	default:
		return false
	}
}

// notify wakes the supervisor without blocking.
func (b *Batch) notify() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// logf appends one line of the runner's to the task's log, through the
// output copier; write errors are counted there, never returned (the log
// is best effort, the status carries the result).
func (b *Batch) logf(format string, args ...any) {
	b.out.line(fmt.Sprintf(format, args...))
}

// writeItems writes the batch's items, one per line, to a file in s.RunDir
// (a pool file of s.Spares, else itemsFileName) and returns its path. For
// a batch run as another user (runAs, uid 0 aside), the run directory is
// checked and made traversable (prepareRunDir); the file is runAs's.
func writeItems(s Spec, runAs *User) (string, error) {
	if err := checkItems(s); err != nil {
		return "", err
	}
	if err := os.MkdirAll(s.RunDir, 0o700); err != nil {
		return "", NewPrepareError(fmt.Errorf("start batch %d of %s: create run directory: %w", s.BatchIndex, s.Task, err))
	}
	if runAs != nil && runAs.UID != 0 {
		if err := prepareRunDir(s.RunDir); err != nil {
			return "", fmt.Errorf("start batch %d of %s: %w", s.BatchIndex, s.Task, err)
		}
	}
	name, err := writeItemsFile(s.Spares, s.RunDir, itemsFileName(s.Task, s.BatchIndex), func(w io.Writer) (int64, error) { return writeItemsTo(w, s) }, runAs)
	if err != nil {
		if name != "" {
			_ = os.Remove(name) // a partial file; never handed on
		}
		return "", NewPrepareError(fmt.Errorf("start batch %d of %s: write items file: %w", s.BatchIndex, s.Task, err))
	}
	return name, nil
}

// itemsFileName names the items file of a task's batch: TASK.batch-INDEX.items,
// a path separator in the name made harmless.
func itemsFileName(task string, index int64) string {
	return fmt.Sprintf("%s.batch-%06d.items", strings.ReplaceAll(task, "/", "_"), index)
}

// itemRange renders the batch's item indices, inclusive: "120..155".
func itemRange(s Spec) string {
	if s.BatchSize() == 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d", s.BatchStart, s.BatchStart+s.BatchSize()-1)
}

// userName renders u's name for the log: " (name)", or "" when unknown.
func userName(u *User) string {
	if u.Name == "" {
		return ""
	}
	return " (" + u.Name + ")"
}

func memoryText(limit int64) string {
	if limit == 0 {
		return "unlimited"
	}
	return governor.FormatBytes(limit)
}

func percent(f float64) string {
	return fmt.Sprintf("%g%%", math.Round(f*1000)/10)
}

func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}

// Started is when the batch's leader started.
func (b *Batch) Started() time.Time { return b.started }
