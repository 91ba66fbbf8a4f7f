package runner

import (
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// In init the main goroutine runs on the main thread, the one whose
// state /proc/PID/stat shows: the helper vforks from there.
func init() {
	if os.Getenv(helperEnv) == "vforkstop" {
		vforkStopHelper()
	}
}

// vforkLine is what the vfork child writes before it stops.
var vforkLine = []byte("child stopped before its exec\n")

// vforkStopHelper is a batch whose leader vforks a child that stops
// itself before any exec: the leader's thread then waits in the kernel
// ('D') until the child goes on or ends.
func vforkStopHelper() {
	runtime.LockOSThread()
	if vforkStopped(uintptr(unsafe.Pointer(&vforkLine[0])), uintptr(len(vforkLine))) < 0 {
		os.Exit(2)
	}
	os.Stdout.WriteString("vfork returned\n")
	for {
		time.Sleep(time.Hour)
	}
}

// vforkStopped vforks a child that writes the n bytes at line to its
// stdout, stops itself and, continued, ends; it returns the child's pid
// in the parent once the child ended, -1 if vfork failed. The child runs
// on the parent's stack, in its memory: raw system calls only, no stack
// growth, no race instrumentation.
//
//go:nosplit
//go:norace
func vforkStopped(line, n uintptr) int {
	pid, _, errno := syscall.RawSyscall(syscall.SYS_VFORK, 0, 0, 0)
	if errno != 0 {
		return -1
	}
	if pid == 0 {
		syscall.RawSyscall(syscall.SYS_WRITE, 1, line, n)
		self, _, _ := syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
		syscall.RawSyscall(syscall.SYS_KILL, self, uintptr(syscall.SIGSTOP), 0)
		syscall.RawSyscall(syscall.SYS_EXIT_GROUP, 0, 0, 0)
	}
	return int(pid)
}

// TestPauseAVforkParentWhoseChildStopped: without a cgroup, a batch caught
// with a vfork child stopped before its exec (a shell that vforks its
// commands, paused at that moment) pauses; the parent, held in the kernel
// until the child goes on, runs again after Resume.
func TestPauseAVforkParentWhoseChildStopped(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := testSpec(t, self)
	s.Env = []EnvVar{{helperEnv, "vforkstop"}}
	b := start(t, s)
	waitFor(t, "the vfork child to stop", func() bool { return strings.Contains(readLog(t, s), string(vforkLine)) })
	leader := b.Group().PGID
	waitFor(t, "the leader to wait in the kernel", func() bool {
		st, err := readStat("/proc", leader)
		return err == nil && st.state == 'D'
	})
	// The child writes its line, then stops itself: a Pause and a Resume
	// between the two would leave it stopping after the Resume, and the
	// leader in vfork for good.
	waitFor(t, "the vfork child to stop itself", func() bool {
		kids := childPIDs(leader)
		if len(kids) != 1 {
			return false
		}
		st, err := readStat("/proc", kids[0])
		return err == nil && st.state == 'T'
	})
	if err := b.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := b.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitFor(t, "the leader to return from vfork", func() bool { return strings.Contains(readLog(t, s), "vfork returned") })
}
