package spool

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/trust"
)

// ErrLocked is wrapped by the error of Lock when another controller runs
// on the spool.
var ErrLocked = errors.New("another controller runs on this spool")

// LockedError names the process holding a spool's lock.
type LockedError struct {
	// Spool is the spool directory.
	Spool string
	// PID is the holder's process id (0 when it cannot be told).
	PID int
	// File is the lock file in the state directory.
	File string
}

// Error says who holds the lock.
func (e *LockedError) Error() string {
	who := "a process this one cannot name"
	if e.PID > 0 {
		who = "PID " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("spool %s: %v: held by %s (lock %s)", e.Spool, ErrLocked, who, e.File)
}

// Unwrap makes errors.Is(err, ErrLocked) true.
func (e *LockedError) Unwrap() error { return ErrLocked }

// LockFileName is the lock file's name in the state directory.
const LockFileName = "controller.lock"

// ControllerLock is a spool's one-controller lock; Unlock or the process's
// end releases it.
type ControllerLock struct {
	files []*os.File
}

// Lock takes the spool's one-controller lock, without waiting: an
// exclusive flock on the spool directory itself (so that two controllers
// with different state directories still exclude each other) and on
// stateDir/controller.lock, which then holds this process's PID. A second
// controller gets a *LockedError naming the holder. The read-only verbs
// take no lock. The descriptors are close-on-exec: batches never hold it.
func Lock(spoolDir, stateDir string) (*ControllerLock, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	// Everything the controller writes by path lives here: a directory
	// someone else can change (replace, or fill with links) is refused.
	if err := trust.OwnDir(stateDir, "state directory"); err != nil {
		return nil, err
	}
	lockPath := filepath.Join(stateDir, LockFileName)
	l := &ControllerLock{}
	dir, err := os.Open(spoolDir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := flockOrOrphan(dir, spoolDir, lockPath); err != nil {
		_ = dir.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &LockedError{Spool: spoolDir, PID: holderOf(spoolDir, lockPath), File: lockPath}
		}
		return nil, fmt.Errorf("lock spool %s: %w", spoolDir, err)
	}
	l.files = append(l.files, dir)
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600) // never through a link
	if err != nil {
		l.Unlock()
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		l.Unlock()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &LockedError{Spool: spoolDir, PID: holderOf(spoolDir, lockPath), File: lockPath}
		}
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	l.files = append(l.files, f)
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return l, nil
}

// Holder is the PID of the process holding spoolDir's one-controller
// lock (the flock on the directory, from /proc/locks), 0 when none does
// or it cannot be told: a controller that took it and has not registered
// or answered yet is starting. It takes no lock.
func Holder(spoolDir string) int {
	var st unix.Stat_t
	if unix.Stat(spoolDir, &st) != nil {
		return 0
	}
	return flockHolder(fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino))
}

// orphanWait bounds how long Lock waits for a lock whose holder is dead.
const orphanWait = 3 * time.Second

// flockOrOrphan takes the exclusive flock on f without waiting, except when
// the PID that took it is gone: a controller killed with -9 while it was
// forking a batch leaves, for a few milliseconds, a child between fork and
// exec that still shares its descriptors (and dies of the parent-death
// signal). Such a lock is waited for, at most orphanWait; a live holder is
// refused at once.
func flockOrOrphan(f *os.File, spoolDir, lockPath string) error {
	deadline := time.Now().Add(orphanWait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		pid := holderOf(spoolDir, lockPath)
		if pid <= 0 || unix.Kill(pid, 0) != unix.ESRCH || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Unlock releases the lock.
func (l *ControllerLock) Unlock() {
	for _, f := range l.files {
		_ = f.Close()
	}
	l.files = nil
}

// holderOf finds the PID holding the lock: the flock owner of the spool
// directory in /proc/locks, else the PID written in the lock file.
func holderOf(spoolDir, lockPath string) int {
	if pid := Holder(spoolDir); pid > 0 {
		return pid
	}
	data, err := os.ReadFile(lockPath)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// flockHolder reads /proc/locks for the FLOCK on the file id
// (MAJOR:MINOR:INODE, as /proc/locks writes it).
func flockHolder(id string) int {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 12345 fd:01:1234567 0 EOF
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		if fields[5] != id {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil {
			return pid
		}
	}
	return 0
}
