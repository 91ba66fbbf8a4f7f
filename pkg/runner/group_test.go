package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
)

// writeStat writes a minimal /proc/PID/stat with the fields procfs reads;
// cpu, when given, are utime, stime, cutime and cstime in clock ticks.
func writeStat(t *testing.T, root string, pid, pgrp int, state string, start uint64, rssPages int, cpu ...int) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime prio nice threads itreal starttime
	// vsize rss, then the rest.
	fields := []string{fmt.Sprint(pid), "(p x)", state, "1", fmt.Sprint(pgrp), "1", "0", "-1", "0",
		"0", "0", "0", "0", "0", "0", "0", "0", "20", "0", "1", "0", fmt.Sprint(start), "1000", fmt.Sprint(rssPages)}
	for i, c := range cpu {
		fields[13+i] = fmt.Sprint(c)
	}
	for len(fields) < 52 {
		fields = append(fields, "0")
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(strings.Join(fields, " ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGroupSamplerFixture(t *testing.T) {
	root := t.TempDir()
	page := int64(os.Getpagesize())
	writeStat(t, root, 100, 100, "S", 500, 10) // leader
	writeStat(t, root, 101, 100, "R", 510, 20) // child
	writeStat(t, root, 102, 100, "Z", 510, 0)  // zombie: not live
	writeStat(t, root, 7, 7, "S", 1, 999)      // another group
	writeStat(t, root, 8, 1, "S", 2, 999)
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	g := newGroupSampler(fs, 100)
	g.pgidOf = nil // a fixture tree: the pids are not this machine's
	rss, live, err := g.sample()
	if err != nil {
		t.Fatal(err)
	}
	if rss != 30*page || live != 2 {
		t.Fatalf("sample = %d bytes, %d live; want %d, 2", rss, live, 30*page)
	}
	// A new process of the group appears, the child grows, one leaves the group.
	writeStat(t, root, 103, 100, "S", 520, 5)
	writeStat(t, root, 101, 100, "R", 510, 40)
	writeStat(t, root, 100, 200, "S", 500, 10)
	if err := os.RemoveAll(filepath.Join(root, "102")); err != nil {
		t.Fatal(err)
	}
	rss, live, err = g.sample()
	if err != nil {
		t.Fatal(err)
	}
	if rss != 45*page || live != 2 {
		t.Fatalf("second sample = %d bytes, %d live; want %d, 2", rss, live, 45*page)
	}
	// A pid that vanishes and comes back is read again.
	if err := os.RemoveAll(filepath.Join(root, "7")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.sample(); err != nil {
		t.Fatal(err)
	}
	writeStat(t, root, 7, 100, "S", 600, 1)
	rss, live, err = g.sample()
	if err != nil {
		t.Fatal(err)
	}
	if rss != 46*page || live != 3 {
		t.Fatalf("third sample = %d bytes, %d live; want %d, 3", rss, live, 46*page)
	}
	ms, err := groupMembers(fs, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("groupMembers = %+v, want 3 members", ms)
	}
}

// TestSampleGroup: what top reads of a batch without a cgroup (or whose
// cgroup is gone) is its process group's live processes, resident memory
// and CPU time (user and system, reaped children included), nothing of
// another group's.
func TestSampleGroup(t *testing.T) {
	root := t.TempDir()
	page := int64(os.Getpagesize())
	writeStat(t, root, 100, 100, "S", 500, 10, 100, 50, 0, 0)  // leader: 1.5 s
	writeStat(t, root, 101, 100, "R", 510, 20, 10, 10, 20, 10) // child: 0.5 s
	writeStat(t, root, 102, 100, "Z", 510, 0, 5, 5, 0, 0)      // zombie: 0.1 s, not live
	writeStat(t, root, 7, 7, "S", 1, 999, 9000, 9000, 0, 0)    // another group
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, cg := range []string{"", filepath.Join(root, "no-such-cgroup")} {
		u, err := SampleGroup(fs, 100, cg)
		if err != nil {
			t.Fatal(err)
		}
		if want := (Usage{Procs: 2, Memory: 30 * page, CPU: 2100 * time.Millisecond}); u != want {
			t.Errorf("cgroup %q: %+v, want %+v", cg, u, want)
		}
	}
	if u, err := SampleGroup(fs, 555, ""); err != nil || u != (Usage{}) {
		t.Errorf("a group gone: %+v, %v", u, err)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := LookPath("tool", "/nonexistent:"+bin, "/"); err != nil || p != filepath.Join(bin, "tool") {
		t.Errorf("LookPath(tool) = %q, %v", p, err)
	}
	if p, err := LookPath("./bin/tool", "", dir); err != nil || p != filepath.Join(bin, "tool") {
		t.Errorf("relative lookPath = %q, %v", p, err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"nope", bin, `command "nope" not found in PATH`},
		{"data", bin, "not executable"},
		{"./bin/data", "", `command "./bin/data" not executable`},
		{"./bin/nope", "", `command "./bin/nope" does not exist`},
		{"bin", dir, "not executable"},
	} {
		_, err := LookPath(tc.name, tc.path, dir)
		if !errors.Is(err, ErrCommandNotFound) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LookPath(%q) error = %v, want ErrCommandNotFound with %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkGroupSample measures one memory sample of a group on the real
// /proc (the incremental sampler), against a full scan.
func BenchmarkGroupSample(b *testing.B) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		b.Fatal(err)
	}
	pgid := os.Getpid() // likely not a group id: the cost is the scan
	b.Run("incremental", func(b *testing.B) {
		g := newGroupSampler(fs, pgid)
		for b.Loop() {
			if _, _, err := g.sample(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		for b.Loop() {
			if _, err := groupMembers(fs, pgid); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestKillByEnvKillsMarkedProcessesAndTheirGroups(t *testing.T) {
	marker := fmt.Sprintf("/tmp/state-%d-%d", os.Getpid(), time.Now().UnixNano())
	start := func(env []string) *exec.Cmd {
		// A leader with a child, in a group of their own, as a batch would be.
		cmd := exec.Command("sh", "-c", "sleep 30 & wait")
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		return cmd
	}
	marked := start([]string{"PATH=" + os.Getenv("PATH"), "LARDON3D_STATE_DIR=" + marker})
	other := start([]string{"PATH=" + os.Getenv("PATH"), "LARDON3D_STATE_DIR=" + marker + "-other"})
	// Wait until both children run, so that there is a group to kill.
	deadline := time.Now().Add(5 * time.Second)
	for len(liveMembers(t, marked.Process.Pid)) < 2 || len(liveMembers(t, other.Process.Pid)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the test processes did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	n, err := KillByEnv("LARDON3D_STATE_DIR", marker)
	if err != nil || n != 2 {
		t.Fatalf("KillByEnv = %d, %v; want the leader and its child", n, err)
	}
	_ = marked.Wait()
	for time.Now().Before(deadline) && len(liveMembers(t, marked.Process.Pid)) > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if left := liveMembers(t, marked.Process.Pid); len(left) > 0 {
		t.Errorf("marked group still has %v", left)
	}
	if left := liveMembers(t, other.Process.Pid); len(left) < 2 {
		t.Errorf("a process with another marker was killed: %v left", left)
	}
}

// TestStartTicksMatchesProcfs: the start time read from field 22 is
// procfs's, for this process and for one whose command holds ") " and
// spaces (the field is found past the last parenthesis).
func TestStartTicksMatchesProcfs(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	odd := filepath.Join(t.TempDir(), "a) b (c")
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(odd, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{os.Getpid(), cmd.Process.Pid} {
		p, err := fs.Proc(pid)
		if err != nil {
			t.Fatal(err)
		}
		st, err := p.Stat()
		if err != nil {
			t.Fatal(err)
		}
		got, err := StartTicks(procfs.DefaultMountPoint, pid)
		if err != nil || got != st.Starttime {
			t.Errorf("pid %d (%s): start ticks %d, %v; procfs says %d", pid, st.Comm, got, err, st.Starttime)
		}
	}
	if _, err := StartTicks(t.TempDir(), 1); err == nil {
		t.Error("a missing stat file read without an error")
	}
}

// TestGroupSamplerPidGivenAgain: a pid judged outside the group that the
// kernel gives to another process between two listings (its pids wrapped
// round; 32768 of them go fast on a busy machine) is judged again: the
// new process's memory is counted, and, without a cgroup, one that left
// the group carrying the batch's marker is found. A pid not given out
// since stays judged.
func TestGroupSamplerPidGivenAgain(t *testing.T) {
	root := t.TempDir()
	page := int64(os.Getpagesize())
	writeStat(t, root, 100, 100, "S", 500, 10) // leader
	writeStat(t, root, 50, 50, "S", 400, 999)  // another group's
	writeStat(t, root, 60, 60, "S", 400, 999)  // another group's
	writeStat(t, root, 80, 80, "S", 1, 999)    // another group's, for good
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	last := 120
	g := newGroupSampler(fs, 100)
	g.pgidOf = func(pid int) (int, error) { st, err := readStat(root, pid); return st.pgrp, err }
	g.lastPid = func() (int, bool) { return last, true }
	g.esc, g.procRoot, g.marker = &escapees{}, root, []byte("MARK=1")
	if rss, live, err := g.sample(); err != nil || rss != 10*page || live != 1 {
		t.Fatalf("first sample = %d bytes, %d live, %v; want %d, 1", rss, live, err, 10*page)
	}
	// Between two listings the pids wrap round (last 120 -> 60): 50 goes
	// to a child of the group, 60 to a process that left it with the
	// marker.
	writeStat(t, root, 50, 100, "S", 600, 20)
	writeStat(t, root, 60, 60, "S", 601, 30)
	if err := os.WriteFile(filepath.Join(root, "60", "environ"), []byte("A=b\x00MARK=1\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	// 80 was not given out since: what is written under it now (no
	// process could move so) is not read again.
	writeStat(t, root, 80, 100, "S", 1, 999)
	last = 60
	rss, live, err := g.sample()
	if err != nil {
		t.Fatal(err)
	}
	if rss != 60*page || live != 3 {
		t.Errorf("after the wrap: %d bytes, %d live; want %d (leader, the new child, the escapee), 3", rss, live, 60*page)
	}
	if got := g.esc.list(); len(got) != 1 || got[60] != 601 {
		t.Errorf("escapees %v, want pid 60 started at 601", got)
	}
}

func TestGivenSince(t *testing.T) {
	for _, c := range []struct {
		pid, prev, last int
		known, want     bool
	}{
		{65, 60, 70, true, true},
		{60, 60, 70, true, false},
		{71, 60, 70, true, false},
		{50, 60, 60, true, false},  // nothing given out
		{130, 120, 60, true, true}, // wrapped: above the old last
		{7, 120, 60, true, true},   // wrapped: below the new one
		{80, 120, 60, true, false},
		{80, -1, 60, true, true},  // no earlier figure
		{80, 120, 0, false, true}, // unreadable
	} {
		if got := givenSince(c.pid, c.prev, c.last, c.known); got != c.want {
			t.Errorf("givenSince(%d, prev %d, last %d, %v) = %v, want %v", c.pid, c.prev, c.last, c.known, got, c.want)
		}
	}
}

// TestGroupSamplerCatchesTheMomentOfALeaving: a child that calls setsid
// between getpgid and the read of its stat, and one caught in an execve
// with no environment yet, are still found to be the batch's; a process
// whose pid changed hands between getpgid and the stat read is not taken
// for the batch's, nor remembered as outside.
func TestGroupSamplerCatchesTheMomentOfALeaving(t *testing.T) {
	root := t.TempDir()
	page := int64(os.Getpagesize())
	writeStat(t, root, 100, 100, "S", 500, 10) // leader
	writeStat(t, root, 101, 101, "S", 510, 20) // setsid between getpgid and stat
	writeStat(t, root, 102, 102, "S", 520, 30) // in an execve: environment empty for now
	writeStat(t, root, 103, 103, "S", 530, 40) // another user's: environment unreadable
	writeStat(t, root, 104, 104, "S", 540, 50) // its pid was a member's at getpgid
	writeStat(t, root, 7, 7, "S", 1, 999)      // older than the batch, environment empty
	for pid, env := range map[int]string{101: "MARK=1\x00", 102: "", 104: "A=b\x00", 7: ""} {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprint(pid), "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	g := newGroupSampler(fs, 100)
	g.pgidOf = func(pid int) (int, error) {
		if pid == 101 || pid == 104 {
			return 100, nil // the kernel's answer a moment before
		}
		st, err := readStat(root, pid)
		return st.pgrp, err
	}
	g.lastPid = func() (int, bool) { return 200, true }
	g.esc, g.procRoot, g.marker, g.since = &escapees{}, root, []byte("MARK=1"), 500
	if rss, live, err := g.sample(); err != nil || rss != 30*page || live != 2 {
		t.Fatalf("first sample = %d bytes, %d live, %v; want %d (leader and 101), 2", rss, live, err, 30*page)
	}
	if !g.outside[7] || !g.outside[103] || g.outside[102] || g.outside[104] {
		t.Errorf("judged outside for good: %v; want 7 and 103, not 102 (empty environment, started since the batch) nor 104", g.outside)
	}
	// The execve completes.
	if err := os.WriteFile(filepath.Join(root, "102", "environ"), []byte("MARK=1\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rss, live, err := g.sample(); err != nil || rss != 60*page || live != 3 {
		t.Fatalf("second sample = %d bytes, %d live, %v; want %d, 3", rss, live, err, 60*page)
	}
	if got := g.esc.list(); len(got) != 2 || got[101] != 510 || got[102] != 520 {
		t.Errorf("escapees %v, want 101 and 102", got)
	}
}
