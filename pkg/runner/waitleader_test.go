package runner

import (
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// osThreads is how many threads this process has now.
func osThreads(t *testing.T) int {
	t.Helper()
	self, err := procfs.Self()
	if err != nil {
		t.Fatal(err)
	}
	st, err := self.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return st.NumThreads
}

// TestWaitLeaderHoldsNoThread: forty leaders waited on at once take no
// thread each (a thread blocked in waitid per batch is what the poller's
// pidfd spares), none is told ended before it exits, each is told once it
// exits, and none is reaped: its zombie keeps the pid until Wait.
func TestWaitLeaderHoldsNoThread(t *testing.T) {
	const n = 40
	before := osThreads(t)
	cmds := make([]*exec.Cmd, n)
	exited := make([]chan struct{}, n)
	for i := range cmds {
		cmds[i] = exec.Command("sleep", "60")
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmds[i].Process.Kill(); _ = cmds[i].Wait() })
		exited[i] = make(chan struct{})
		go waitLeader(cmds[i].Process.Pid, exited[i])
	}
	time.Sleep(200 * time.Millisecond) // the waiters are parked by now
	if during := osThreads(t); during >= before+n/2 {
		t.Errorf("%d threads while %d leaders are waited on, %d before: a thread per wait", during, n, before)
	}
	for i, ch := range exited {
		select {
		case <-ch:
			t.Fatalf("leader %d told ended while it runs", i)
		default:
		}
	}
	for _, c := range cmds {
		_ = c.Process.Kill()
	}
	for i, ch := range exited {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("leader %d killed but not told ended", i)
		}
		st, err := readStat("/proc", cmds[i].Process.Pid)
		if err != nil || st.state != 'Z' {
			t.Errorf("leader %d after its end: state %q, %v; want its zombie, not reaped", i, st.state, err)
		}
	}
}
