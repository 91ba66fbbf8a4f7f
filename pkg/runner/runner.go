package runner

import (
	"context"
	"errors"
	"fmt"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// pauseWait bounds how long Pause waits for every process to stop.
const pauseWait = 5 * time.Second

// Batch is a batch in flight: one command run as its own process group.
// Its methods are safe for concurrent use.
type Batch struct {
	spec      Spec
	fs        procfs.FS
	cmd       *exec.Cmd
	group     ProcessGroup
	started   time.Time
	log       *os.File
	itemsFile string
	// rss is the group's resident memory at the last sample.
	rss atomic.Int64

	cancelOnce sync.Once
	cancelCh   chan struct{} // closed by Cancel
	wake       chan struct{} // buffered(1): the pause state changed
	done       chan struct{} // closed once result is set
	result     Result

	// opMu serializes Pause and Resume; it is taken before mu.
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
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, fmt.Errorf("open procfs: %w", err)
	}
	itemsFile, err := writeItems(s)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(s.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	b := &Batch{
		spec: s, fs: fs, log: logf, itemsFile: itemsFile,
		cancelCh: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	b.logf("=== batch %d items %s threads %d memory %s attempt %d at %s ===",
		s.BatchIndex, itemRange(s), s.Threads, memoryText(s.MemoryLimit), s.Attempt,
		time.Now().Format(time.RFC3339))
	if err := b.start(); err != nil {
		b.logf("=== batch %d could not start: %v ===", s.BatchIndex, err)
		_ = logf.Close()
		return nil, fmt.Errorf("start batch %d of %s: %w", s.BatchIndex, s.Task, err)
	}
	leaderExited := make(chan struct{})
	go waitLeader(b.cmd.Process.Pid, leaderExited)
	go b.supervise(ctx, leaderExited)
	return b, nil
}

// start resolves and launches the command.
func (b *Batch) start() error {
	s := b.spec
	env, argv, err := buildEnv(os.Environ(), s, b.itemsFile)
	if err != nil {
		return err
	}
	if s.WorkingDir != "" {
		if fi, err := os.Stat(s.WorkingDir); err != nil {
			return fmt.Errorf("working directory: %w", err)
		} else if !fi.IsDir() {
			return fmt.Errorf("working directory %s: not a directory", s.WorkingDir)
		}
	}
	path, err := lookPath(argv[0], envValue(env, "PATH"), s.WorkingDir)
	if err != nil {
		return err
	}
	cmd := &exec.Cmd{
		Path:   path,
		Args:   argv,
		Env:    env,
		Dir:    s.WorkingDir,
		Stdout: b.log,
		Stderr: b.log,
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if err := startWithAffinity(cmd, s.CPUs, b.logf); err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) && (errno == syscall.ENOENT || errno == syscall.EACCES || errno == syscall.ENOEXEC) {
			// execve refused a file that exists: a bad or missing
			// interpreter (#!), a binary for another machine, no
			// permission on the way.
			return notFoundError(fmt.Sprintf("command %q cannot be executed: %v", argv[0], errno))
		}
		return err
	}
	b.cmd = cmd
	b.started = time.Now()
	pid := cmd.Process.Pid
	b.group = ProcessGroup{PGID: pid, BootID: readBootID(procfs.DefaultMountPoint)}
	// The leader is not reaped before the group is empty (see supervise),
	// so its stat is readable here even if it already exited.
	if ticks, err := readStartTicks(b.fs, pid); err == nil {
		b.group.StartTicks = ticks
	} else {
		b.logf("=== batch %d: cannot read the start time of pid %d: %v ===", s.BatchIndex, pid, err)
	}
	return nil
}

// startWithAffinity starts cmd from an OS thread whose CPU affinity is cpus,
// so that the child inherits it from its first instruction (no window where
// it runs unbound), then restores the thread's affinity. The Go runtime does
// not create threads from a locked thread, so no other thread inherits the
// temporary mask. When the affinity cannot be set, the command starts
// unbound and the log says why.
func startWithAffinity(cmd *exec.Cmd, cpus []int, logf func(string, ...any)) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	var want unix.CPUSet
	for _, c := range cpus {
		if c >= 0 {
			want.Set(c)
		}
	}
	if want.Count() == 0 {
		logf("=== cpu affinity %v not applied: no valid cpu ===", cpus)
		return cmd.Start()
	}
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		logf("=== cpu affinity %v not applied: %v ===", cpus, err)
		return cmd.Start()
	}
	if err := unix.SchedSetaffinity(0, &want); err != nil {
		runtime.UnlockOSThread()
		logf("=== cpu affinity %v not applied: %v ===", cpus, err)
		return cmd.Start()
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil {
		// Keep the thread locked: the goroutine's end then retires it
		// rather than let other goroutines run on a narrowed thread. The
		// child's parent-death signal follows the thread, so kill the child
		// rather than leave it to die at random.
		if err == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return fmt.Errorf("restore cpu affinity: %w", rerr)
	}
	runtime.UnlockOSThread()
	return err
}

// waitLeader closes exited when pid has exited, without reaping it: the
// zombie keeps the pid and the group id from being reused while the rest of
// the group is killed.
func waitLeader(pid int, exited chan<- struct{}) {
	defer close(exited)
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// supervise owns the batch from start to end: it samples memory, enforces
// the limit and the timeout, handles cancel, and after the leader exits
// kills what is left of the group, reaps the leader and sets the result.
func (b *Batch) supervise(ctx context.Context, leaderExited <-chan struct{}) {
	defer close(b.done)
	s := b.spec
	sampler := newGroupSampler(b.fs, b.group.PGID)
	ceiling := s.memoryCeiling()
	var (
		peak          int64
		reason, msg   string
		terminating   bool
		graceC        <-chan time.Time
		timeoutC      <-chan time.Time
		timeout       *time.Timer
		sampleErrSeen bool
		memKilled     bool
	)
	sample := func() int {
		rss, live, err := sampler.sample()
		if err != nil {
			if !sampleErrSeen {
				sampleErrSeen = true
				b.logf("=== batch %d: memory sampling failed: %v ===", s.BatchIndex, err)
			}
			return -1
		}
		peak = max(peak, rss)
		b.rss.Store(rss)
		return live
	}
	setReason := func(r, m string) {
		if reason == "" {
			reason, msg = r, m
		}
	}
	terminate := func() {
		if terminating {
			return
		}
		terminating = true
		_ = signalGroup(b.group.PGID, unix.SIGTERM)
		_ = signalGroup(b.group.PGID, unix.SIGCONT) // a stopped process must run to handle SIGTERM
		graceC = time.After(s.KillGrace)
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
	ctxDone, cancelCh := ctx.Done(), b.cancelCh
	sample()
loop:
	for {
		select {
		case <-leaderExited:
			break loop
		case <-ticker.C:
			sample()
			if ceiling > 0 && peak > ceiling && !memKilled {
				memKilled = true
				setReason(ReasonMemoryExceeded, fmt.Sprintf("peak %s exceeded the contract %s by more than %s",
					governor.FormatBytes(peak), governor.FormatBytes(s.MemoryLimit), percent(s.MemoryTolerance)))
				_ = signalGroup(b.group.PGID, unix.SIGKILL)
			}
		case <-b.wake:
			armTimeout()
		case <-timeoutC:
			timeoutC = nil
			setReason(ReasonBatchTimeout, fmt.Sprintf("ran longer than the batch timeout %v", s.Timeout))
			terminate()
		case <-cancelCh:
			cancelCh = nil
			setReason(ReasonCancelled, "cancelled")
			terminate()
		case <-ctxDone:
			ctxDone = nil
			setReason(ReasonCancelled, fmt.Sprintf("cancelled: %v", context.Cause(ctx)))
			terminate()
		case <-graceC:
			graceC = nil
			_ = signalGroup(b.group.PGID, unix.SIGKILL)
		}
	}
	if timeout != nil {
		timeout.Stop()
	}
	// The leader has exited but is not reaped: kill the rest of the group
	// and wait until no live process remains.
	stragglers := -1
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		live := sample()
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
		_ = signalGroup(b.group.PGID, unix.SIGKILL)
		time.Sleep(wait)
	}
	waitErr := b.cmd.Wait()
	ended := time.Now()

	res := Result{Reason: reason, Message: msg, Stragglers: stragglers, Started: b.started, Ended: ended, ExitCode: -1}
	if st := b.cmd.ProcessState; st != nil {
		res.ExitCode = st.ExitCode()
		// Not the leader's ru_maxrss: it keeps the high-water mark of the
		// controller's own image, shared before exec, so every short command
		// would report the controller's size. The peak is what was sampled.
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
	res.PeakMemoryBytes = peak
	if stragglers > 0 {
		b.logf("=== batch %d: killed %d processes left in the group after the leader exited ===", s.BatchIndex, stragglers)
	}
	end := fmt.Sprintf("exit code %d", res.ExitCode)
	if res.Reason != "" {
		end = res.Reason + ": " + res.Message
	} else if res.Message != "" {
		end = res.Message
	}
	b.logf("=== batch %d ended: %s after %v, peak memory %s ===", s.BatchIndex, end,
		ended.Sub(b.started).Round(time.Millisecond), governor.FormatBytes(peak))
	_ = b.log.Close()
	if res.ExitCode == 0 && res.Reason == "" {
		_ = os.Remove(b.itemsFile)
	}
	b.result = res
}

// Group returns the batch's process group, to be recorded so that a
// restarted controller can kill what a crashed one left (KillLeftover).
func (b *Batch) Group() ProcessGroup { return b.group }

// MemoryBytes returns the group's resident memory at the last sample (0
// before the first one and after the batch ended).
func (b *Batch) MemoryBytes() int64 {
	if b.ended() {
		return 0
	}
	return b.rss.Load()
}

// ItemsFile returns the path of the file listing the batch's items. It is
// removed when the batch succeeds and kept otherwise.
func (b *Batch) ItemsFile() string { return b.itemsFile }

// Pause stops every process of the group with SIGSTOP and returns once each
// of them is in the stopped state, as read in procfs. A process that forks
// during the pause is stopped too. Paused time does not count against the
// timeout.
func (b *Batch) Pause() error {
	b.opMu.Lock()
	defer b.opMu.Unlock()
	if b.ended() {
		return ErrBatchEnded
	}
	pgid := b.group.PGID
	if err := signalGroup(pgid, unix.SIGSTOP); err != nil {
		return err
	}
	b.mu.Lock()
	if !b.mu.paused {
		b.mu.paused = true
		b.mu.pausedSince = time.Now()
		b.notify()
	}
	b.mu.Unlock()
	deadline := time.Now().Add(pauseWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 20*time.Millisecond) {
		ms, err := groupMembers(b.fs, pgid)
		if err != nil {
			return err
		}
		var running []int
		for _, m := range ms {
			if !m.stopped() && !m.gone() {
				running = append(running, m.pid)
				_ = unix.Kill(m.pid, unix.SIGSTOP)
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

// Resume continues the group with SIGCONT.
func (b *Batch) Resume() error {
	b.opMu.Lock()
	defer b.opMu.Unlock()
	if b.ended() {
		return ErrBatchEnded
	}
	if err := signalGroup(b.group.PGID, unix.SIGCONT); err != nil {
		return err
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

// Wait blocks until the leader has exited and no live process of the group
// remains, and returns how the batch ended.
func (b *Batch) Wait() Result {
	<-b.done
	return b.result
}

// Done is closed when the batch has ended (Wait then returns at once).
func (b *Batch) Done() <-chan struct{} { return b.done }

func (b *Batch) ended() bool {
	select {
	case <-b.done:
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

// logf appends one line to the task's log; write errors are ignored (the
// log is best effort, the status carries the result).
func (b *Batch) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(b.log, format+"\n", args...)
}

// writeItems writes the batch's items, one per line, to a file in s.RunDir
// (through a temporary file and a rename) and returns its path.
func writeItems(s Spec) (string, error) {
	if err := os.MkdirAll(s.RunDir, 0o755); err != nil {
		return "", fmt.Errorf("create run directory: %w", err)
	}
	var sb strings.Builder
	for _, it := range s.Items {
		if strings.ContainsAny(it, "\n\r") {
			return "", fmt.Errorf("%w: item %q contains a line break", ErrInvalidSpec, it)
		}
		sb.WriteString(it)
		sb.WriteByte('\n')
	}
	name := filepath.Join(s.RunDir, fmt.Sprintf("batch-%06d.items", s.BatchIndex))
	tmp, err := os.CreateTemp(s.RunDir, ".items-*")
	if err != nil {
		return "", fmt.Errorf("write items file: %w", err)
	}
	_, werr := tmp.WriteString(sb.String())
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("write items file: %w", err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("write items file: %w", err)
	}
	return name, nil
}

// itemRange renders the batch's item indices, inclusive: "120..155".
func itemRange(s Spec) string {
	if len(s.Items) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d", s.BatchStart, s.BatchStart+int64(len(s.Items))-1)
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
