package runner

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A batch is timed by the batch, not by when its supervisor looked: a
// controller stopped (SIGSTOP, a debugger, a machine swapping it out) for
// longer than a batch's timeout wakes to a fired timer and an exited
// leader at once, and whichever it looked at first would decide. The rule:
// when the timeout is handled, a leader that has already exited ended on
// its own, and its exit decides, unless the kernel's clock shows it exited
// past the deadline; the batch's end is the leader's exit, not the moment
// the controller noticed it.

// stallSlack is how much later than the leader's exit the supervisor may
// notice it before the end it reports is moved back to the exit: more
// than a sample interval and a busy machine's scheduling delay.
const stallSlack = time.Second

// leaderExitedAgo reports whether the leader pid has exited (it is not
// reaped: waitid WNOWAIT) and, when the kernel's scheduler clock tells
// it (/proc/PID/sched, where the kernel has CONFIG_SCHED_DEBUG), how long
// ago: the zombie last ran when it exited, and the calling thread's clock
// reads now on the same scale.
func leaderExitedAgo(pid int) (exited bool, ago time.Duration, known bool) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || info.Signo != int32(unix.SIGCHLD) {
			return false, 0, false
		}
		break
	}
	last, err := schedExecStart(fmt.Sprintf("/proc/%d/sched", pid))
	if err != nil {
		return true, 0, false
	}
	now, err := schedExecStart("/proc/thread-self/sched")
	if err != nil || now < last {
		return true, 0, false
	}
	return true, now - last, true
}

// schedExecStart reads se.exec_start (milliseconds, with a fraction, on
// the scheduler's clock) from a /proc sched file.
func schedExecStart(path string) (time.Duration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parseExecStart(data)
}

// parseExecStart finds se.exec_start in the text of a /proc sched file.
func parseExecStart(data []byte) (time.Duration, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		v, ok := bytes.CutPrefix(sc.Bytes(), []byte("se.exec_start"))
		if !ok {
			continue
		}
		_, v, ok = bytes.Cut(v, []byte(":"))
		if !ok {
			break
		}
		ms, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
		if err != nil || ms < 0 {
			break
		}
		return time.Duration(ms * float64(time.Millisecond)), nil
	}
	return 0, fmt.Errorf("no se.exec_start in the sched file")
}

// timedOutByItsClock decides a fired timeout for a batch whose leader may
// have exited meanwhile: true when the batch is still running or its
// leader exited past deadline (as its clock tells); false when it exited
// in time or when it is unknown when it exited (the batch is given the
// benefit: a timeout stops a runaway, and this one ended by itself).
func timedOutByItsClock(pid int, deadline, now time.Time) bool {
	exited, ago, known := leaderExitedAgo(pid)
	if !exited {
		return true
	}
	return known && now.Add(-ago).After(deadline)
}
