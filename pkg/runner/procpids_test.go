package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestPidsAfterSeeksPastOlderProcesses: on this kernel's procfs the
// listing starts at the pid asked for. A process started after the test
// is listed, the test's own pid and every older one are not (unless the
// pids wrapped round), no process above the test's pid and up to the last
// pid given out that is older than the child is missing, and every
// process above that last pid is older than the test.
func TestPidsAfterSeeksPastOlderProcesses(t *testing.T) {
	if !seekableProc("/proc") {
		t.Fatal("seeking /proc to a pid does not list from that pid on this kernel")
	}
	self := os.Getpid()
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	// The seek itself: the listing from the child's pid starts with it.
	from, err := readProcFrom("/proc", child.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(from) == 0 || from[0] != strconv.Itoa(child.Process.Pid) {
		t.Fatalf("listing /proc from %d starts with %.3v", child.Process.Pid, from)
	}
	for _, name := range from {
		if pid, err := strconv.Atoi(name); err == nil && pid < child.Process.Pid {
			t.Errorf("listing /proc from %d holds %d", child.Process.Pid, pid)
		}
	}
	before, ok := nsLastPid("/proc")
	wrapped := !ok || before < self
	got, err := pidsAfter("/proc", self)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, child.Process.Pid) {
		t.Errorf("pidsAfter(%d) = %v, without the child %d", self, got, child.Process.Pid)
	}
	if !wrapped { // else every pid is listed, on purpose
		for _, pid := range got {
			if pid <= self {
				t.Errorf("pidsAfter(%d) lists %d", self, pid)
			}
		}
	}
	all, err := pidsAfter("/proc", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(all, 1) || !slices.Contains(all, self) {
		t.Errorf("pidsAfter(0) = %v, without init or the test", all)
	}
	// The bound pidsAfter puts at the last pid given out: every process
	// above it is older than the test (given out before the pids wrapped
	// round), on a machine where they did and kernel threads sit there.
	last, ok := nsLastPid("/proc")
	if !ok {
		t.Fatal("ns_last_pid cannot be read")
	}
	selfTicks := mustStartTicks(t, self)
	for _, pid := range all {
		if pid > self && pid <= last && alive(pid) && !slices.Contains(got, pid) {
			// Started between the two listings, or missed by the seek.
			if st, err := readStat("/proc", pid); err == nil && st.startTicks < mustStartTicks(t, child.Process.Pid) {
				t.Errorf("process %d, older than the child, is missing from the seeking listing", pid)
			}
		}
		if pid > last && last >= self {
			if st, err := readStat("/proc", pid); err == nil && st.startTicks > selfTicks {
				t.Errorf("process %d, above the last pid given out (%d), started after the test", pid, last)
			}
		}
	}
}

func mustStartTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	st, err := readStat("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	return st.startTicks
}

// TestPidsAfterReadsEveryPidWhenPidsWrapped: a directory that is not a
// procfs is listed whole and filtered; a last pid below the one asked
// for (the kernel's pids wrapped round) or an unreadable one lists every
// pid, since a process started since may have any pid; one above it
// bounds the pids listed, those above being older.
func TestPidsAfterReadsEveryPidWhenPidsWrapped(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"3", "10", "20", "self", "sys"} {
		if err := os.MkdirAll(filepath.Join(root, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if seekableProc(root) {
		t.Fatal("a plain directory counts as a seekable procfs")
	}
	lastPid := func(v string) {
		t.Helper()
		dir := filepath.Join(root, "sys", "kernel")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ns_last_pid"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		last  string // "" leaves ns_last_pid absent
		after int
		want  []int
	}{
		{"", 10, []int{3, 10, 20}},
		{"30\n", 10, []int{20}},
		{"20\n", 10, []int{20}},
		{"15\n", 10, []int{}}, // 20 is older than 10: given out before the pids wrapped round
		{"15\n", 0, []int{3, 10, 20}},
		{"30\n", 0, []int{3, 10, 20}},
		{"5\n", 10, []int{3, 10, 20}},
		{"not a pid", 10, []int{3, 10, 20}},
	} {
		_ = os.RemoveAll(filepath.Join(root, "sys", "kernel"))
		if c.last != "" {
			lastPid(c.last)
		}
		got, err := pidsAfter(root, c.after)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("ns_last_pid %q, after %d: pidsAfter = %v, want %v", c.last, c.after, got, c.want)
		}
	}
}
