package runner

import (
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseExecStart(t *testing.T) {
	got, err := parseExecStart([]byte("sleep (8430, #threads: 1)\n----\nse.exec_start                                :        932459.726381\nse.vruntime : 1.0\n"))
	if err != nil || got != 932459726381*time.Nanosecond {
		t.Errorf("parseExecStart = %v, %v; want 932459.726381ms", got, err)
	}
	for _, bad := range []string{"", "se.vruntime : 1\n", "se.exec_start : x\n", "se.exec_start 12\n"} {
		if _, err := parseExecStart([]byte(bad)); err == nil {
			t.Errorf("parseExecStart(%q): no error", bad)
		}
	}
}

// The leader's exit is dated by the kernel, not by when it was noticed:
// looked at 1.5 s after it exited, it exited about 1.5 s ago.
func TestLeaderExitIsDatedByTheKernel(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the controller "stalled"
	exited, ago, known := leaderExitedAgo(pid)
	if !exited {
		t.Fatal("an exited leader reads as running")
	}
	if !known {
		t.Skip("this kernel has no /proc/PID/sched (CONFIG_SCHED_DEBUG): the batch gets the benefit of the doubt")
	}
	if ago < time.Second || ago > time.Minute {
		t.Errorf("exited %v ago, want about 1.5s", ago)
	}
	deadline := time.Now().Add(-500 * time.Millisecond)
	if timedOutByItsClock(pid, deadline, time.Now()) {
		t.Errorf("a leader that exited 1.5 s ago, 1 s before a deadline 0.5 s ago, timed out")
	}
	if !timedOutByItsClock(pid, time.Now().Add(-3*time.Second), time.Now()) {
		t.Errorf("a leader that exited 1.5 s after its deadline did not time out")
	}
}

func TestRunningLeaderTimesOut(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if !timedOutByItsClock(cmd.Process.Pid, time.Now().Add(-time.Second), time.Now()) {
		t.Error("a running leader past its deadline did not time out")
	}
}
