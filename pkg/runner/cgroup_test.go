package runner

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
)

// testTree opens a cgroup subtree of its own for one test, under the test
// process's cgroup, and removes it at the end. Where no memory cgroup can be
// created (not root, nothing mounted), the test is skipped and says why.
func testTree(t *testing.T) *cgroup.Tree {
	t.Helper()
	var r [4]byte
	_, _ = rand.Read(r[:])
	tree, err := cgroup.Open(cgroup.Options{Name: fmt.Sprintf("lardon3d-test-%d-%x", os.Getpid(), r)})
	if errors.Is(err, cgroup.ErrUnavailable) {
		t.Skipf("no memory cgroup can be created on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := KillLeftoverCgroups(tree); err != nil && !errors.Is(err, os.ErrNotExist) { // a test may remove the tree
			t.Errorf("clean-up: %v", err)
		}
		if err := tree.Remove(); err != nil {
			t.Errorf("clean-up: %v", err)
		}
	})
	return tree
}

func cgSpec(t *testing.T, tree *cgroup.Tree, command ...string) Spec {
	s := testSpec(t, command...)
	s.Cgroup = tree
	return s
}

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 is needed to allocate memory the way users' steps do: %v", err)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z' && s[i+2] != 'X'
}

// pidsOf returns the pids a batch printed, one "pid N" per line of its log.
func pidsOf(t *testing.T, s Spec, want int) []int {
	t.Helper()
	var pids []int
	waitFor(t, fmt.Sprintf("%d pids in the log", want), func() bool {
		pids = pids[:0]
		for _, line := range strings.Split(readLog(t, s), "\n") {
			if v, ok := strings.CutPrefix(line, "pid "); ok {
				if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		return len(pids) >= want
	}, func() string { return readLog(t, s) })
	return pids
}

func TestCgroupStopsABurstTheSamplerCannotSee(t *testing.T) {
	needPython(t)
	tree := testTree(t)
	// 2 GiB mapped and touched in one system call, under a 64Mi contract:
	// no sample sees it coming; the kernel stops it at the limit.
	s := cgSpec(t, tree, "python3", "-c",
		"import mmap; m = mmap.mmap(-1, 2 << 30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE); print('survived')")
	s.MemoryLimit = 64 << 20
	s.SampleInterval = time.Second
	res := start(t, s).Wait()
	limit := s.MemoryLimit + s.MemoryLimit/10 // the default tolerance
	if res.Reason != ReasonMemoryExceeded {
		t.Fatalf("result %+v, want MemoryExceeded; log:\n%s", res, readLog(t, s))
	}
	if res.PeakMemoryBytes > limit || res.PeakMemoryBytes < limit/2 {
		t.Errorf("peak %d, want at most the limit %d and near it", res.PeakMemoryBytes, limit)
	}
	if res.OOMKills < 1 || !strings.HasPrefix(res.Enforcement, "cgroup v") {
		t.Errorf("OOM kills %d, enforcement %q; want the kernel's kill in a cgroup", res.OOMKills, res.Enforcement)
	}
	if strings.Contains(readLog(t, s), "survived") {
		t.Errorf("the burst ran to completion")
	}
	if !strings.Contains(res.Message, "the kernel killed it at its limit 70.4MiB (the contract 64.0MiB plus 10%)") {
		t.Errorf("message %q does not give the limit and the contract", res.Message)
	}
}

func TestCgroupCatchesAnAllocatorThatLeftItsGroup(t *testing.T) {
	needPython(t)
	tree := testTree(t)
	// setsid puts the allocator in a session of its own: no process-group
	// sampler sees it; its cgroup does.
	s := cgSpec(t, tree, "setsid", "-w", "python3", "-c",
		"import time; b = bytearray(b'x') * (600 << 20); time.sleep(1)")
	s.MemoryLimit = 20 << 20
	res := start(t, s).Wait()
	if res.Reason != ReasonMemoryExceeded {
		t.Fatalf("result %+v, want MemoryExceeded (not Done); log:\n%s", res, readLog(t, s))
	}
}

func TestCgroupKillsProcessesThatLeftTheSessionOnCancel(t *testing.T) {
	tree := testTree(t)
	s := cgSpec(t, tree, "sh", "-c",
		`setsid sh -c 'echo pid $$$$; exec sleep 301' & env -i setsid sh -c 'echo pid $$$$; exec sleep 302' & sleep 300`)
	s.KillGrace = 300 * time.Millisecond
	b := start(t, s)
	pids := pidsOf(t, s, 2)
	for _, pid := range pids {
		if pg, _ := unix.Getpgid(pid); pg == b.Group().PGID {
			t.Fatalf("pid %d is still in the batch's process group: the test does not escape", pid)
		}
	}
	b.Cancel()
	res := b.Wait()
	if res.Reason != ReasonCancelled {
		t.Errorf("reason %q, want Cancelled", res.Reason)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d (left the session with setsid) survived the cancel", pid)
		}
	}
}

func TestCgroupPeakCountsSharedPagesOnce(t *testing.T) {
	needPython(t)
	tree := testTree(t)
	// 500 MiB touched, then three forks that keep it mapped: the RSS sum
	// says 2 GiB, the kernel says 500 MiB.
	s := cgSpec(t, tree, "python3", "-c", `
import os, time
b = bytearray(500 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
kids = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        time.sleep(1.5)
        os._exit(0)
    kids.append(pid)
time.sleep(1.5)
for k in kids:
    os.waitpid(k, 0)
`)
	s.MemoryLimit = 4 << 30
	res := start(t, s).Wait()
	if res.ExitCode != 0 || res.Reason != "" {
		t.Fatalf("result %+v; log:\n%s", res, readLog(t, s))
	}
	const mib = 1 << 20
	if res.PeakMemoryBytes < 500*mib || res.PeakMemoryBytes > 700*mib {
		t.Errorf("peak %d MiB, want about 500 MiB (not 500 x 4)", res.PeakMemoryBytes/mib)
	}
	if res.PeakWorkingSetBytes < 400*mib || res.PeakWorkingSetBytes > res.PeakMemoryBytes {
		t.Errorf("working set %d MiB, want about 500 MiB and at most the peak %d MiB", res.PeakWorkingSetBytes/mib, res.PeakMemoryBytes/mib)
	}
}

func TestCgroupPageCacheReadIsNotTheBatchNeed(t *testing.T) {
	tree := testTree(t)
	// A 256 MiB file read under a 64Mi contract: the kernel reclaims the
	// page cache at the limit instead of killing, and the working set
	// stays small.
	data := filepath.Join(t.TempDir(), "input.bin")
	f, err := os.Create(data)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for range 256 {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Drop the file's pages from the cache: they were charged to the
	// test, and the batch must read (and be charged for) them itself.
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	s := cgSpec(t, tree, "sh", "-c", `cat "$0" > /dev/null; cat "$0" > /dev/null`, data)
	s.MemoryLimit = 64 << 20
	res := start(t, s).Wait()
	if res.ExitCode != 0 || res.Reason != "" {
		t.Fatalf("reading files was killed: %+v; log:\n%s", res, readLog(t, s))
	}
	if res.PeakWorkingSetBytes > 32<<20 {
		t.Errorf("working set %d MiB after only reading a file, want a few MiB", res.PeakWorkingSetBytes>>20)
	}
}

func TestCgroupPauseFreezesEveryMember(t *testing.T) {
	tree := testTree(t)
	out := filepath.Join(t.TempDir(), "ticks")
	// A counter in a session of its own, beside a sleeper: a frozen
	// cgroup stops both.
	s := cgSpec(t, tree, "sh", "-c",
		`setsid sh -c 'echo pid $$$$; while :; do echo x >> "$0"; sleep 0.01; done' "$0" & echo pid $$$$; sleep 300`, out)
	b := start(t, s)
	pids := pidsOf(t, s, 2)
	waitFor(t, "the counter", func() bool { st, err := os.Stat(out); return err == nil && st.Size() > 0 })
	if err := b.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		st := string(b)
		if state := st[strings.LastIndexByte(st, ')')+2]; state != 'D' && state != 'T' {
			t.Errorf("pid %d in state %c while frozen, want D (frozen)", pid, state)
		}
	}
	before, _ := os.ReadFile(out)
	time.Sleep(300 * time.Millisecond)
	after, _ := os.ReadFile(out)
	if len(after) != len(before) {
		t.Errorf("the counter went on while paused: %d -> %d bytes", len(before), len(after))
	}
	if err := b.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitFor(t, "the counter to go on", func() bool {
		now, _ := os.ReadFile(out)
		return len(now) > len(after)
	})
	b.Cancel()
	b.Wait()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d survived the cancel", pid)
		}
	}
}

func TestKillLeftoverCgroupsAfterControllerDeath(t *testing.T) {
	tree := testTree(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A controller (this test binary in its "controller" role) starts a
	// batch whose processes leave its session, then dies with kill -9.
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=controller", runDirEnv+"="+dir, cgroupNameEnv+"="+filepath.Base(tree.Dir()),
		commandEnv+`=setsid sh -c 'echo pid $$$$; exec sleep 301' & env -i setsid sh -c 'echo pid $$$$; exec sleep 302' & echo pid $$$$; exec sleep 300`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if _, err := stdout.Read(buf); err != nil {
		t.Fatal(err)
	}
	spec := Spec{LogPath: filepath.Join(dir, "log")}
	pids := pidsOf(t, spec, 3)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	time.Sleep(100 * time.Millisecond) // the parent-death signal reaches the leader
	var survivors []int
	for _, pid := range pids {
		if alive(pid) {
			survivors = append(survivors, pid)
		}
	}
	if len(survivors) == 0 {
		t.Fatalf("nothing survived the controller: the test does not reproduce a leftover")
	}
	n, err := KillLeftoverCgroups(tree)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(survivors) {
		t.Errorf("killed %d, want the %d survivors %v", n, len(survivors), survivors)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d survived the restart's clean-up", pid)
		}
	}
	if left, _ := tree.Leftovers(); len(left) != 0 {
		t.Errorf("%d cgroups left under the subtree", len(left))
	}
}

func TestKillByEnvSparesAnotherUsersProcess(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) is needed: %v", err)
	}
	marker := fmt.Sprintf("/tmp/lardon3d-state-%d", os.Getpid())
	// Another user's shell job: a process carrying the state directory
	// beside a sibling in the same process group.
	other := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"sh", "-c", "env LARDON3D_STATE_DIR="+marker+" sleep 300 & sleep 300 & wait")
	other.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(-other.Process.Pid, unix.SIGKILL); _ = other.Wait() })
	// Our own leftover with the same marker: this one must die.
	mine := exec.Command("sleep", "300")
	mine.Env = append(os.Environ(), "LARDON3D_STATE_DIR="+marker)
	mine.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	if err := mine.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mine.Process.Kill(); _ = mine.Wait() })
	waitFor(t, "the other user's processes", func() bool { return len(liveMembers(t, other.Process.Pid)) == 3 })
	n, err := KillByEnv("LARDON3D_STATE_DIR", marker)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("killed %d, want 1 (ours only)", n)
	}
	waitFor(t, "our leftover to die", func() bool { return !alive(mine.Process.Pid) })
	time.Sleep(50 * time.Millisecond)
	if got := len(liveMembers(t, other.Process.Pid)); got != 3 {
		t.Errorf("the other user's job has %d live processes, want 3 untouched", got)
	}
}

func TestKillLeftoverRefusesACgroupOutsideALardonSubtree(t *testing.T) {
	// A tampered record naming the test's own memory cgroup (where this
	// test runs) must not get it killed.
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var mem string
	for _, line := range strings.Split(string(self), "\n") {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] == "memory" {
			mem = filepath.Join("/sys/fs/cgroup/memory", f[2])
		}
	}
	if mem == "" {
		t.Skip("no cgroup v1 memory hierarchy here")
	}
	ref := cgroup.Ref{Version: 1, Dirs: map[string]string{cgroup.Memory: mem}}
	n, err := KillLeftover(ProcessGroup{PGID: 999999, Cgroup: &ref})
	if err == nil || n != 0 {
		t.Fatalf("KillLeftover of the test's own cgroup: %d, %v; want a refusal", n, err)
	}
}

func TestCgroupContractBelowTheKernelFloor(t *testing.T) {
	needPython(t)
	tree := testTree(t)
	// 100 bytes: a mistake, but one the controller must survive (on v1 its
	// forking thread passes through the batch's cgroup, whose limit is
	// the kernel's floor, not 100 bytes). A command that needs nothing
	// runs to its end, or is stopped by the sampler if a sample caught it
	// alive (its working set is some 200 KiB: under load, `true` can
	// outlive the first sample); never by the kernel. One that allocates
	// is stopped.
	s := cgSpec(t, tree, "true")
	s.MemoryLimit = 100
	res := start(t, s).Wait()
	ranThrough := res.ExitCode == 0 && res.Reason == ""
	sampled := res.Reason == ReasonMemoryExceeded && strings.HasPrefix(res.Message, "working set ")
	if (!ranThrough && !sampled) || res.OOMKills != 0 {
		t.Fatalf("true under a 100-byte contract: %+v; log:\n%s", res, readLog(t, s))
	}
	s = cgSpec(t, tree, "python3", "-c", "import time; b = bytearray(b'x') * (64 << 20); time.sleep(2)")
	s.MemoryLimit = 1 << 20
	res = start(t, s).Wait()
	if res.Reason != ReasonMemoryExceeded {
		t.Fatalf("64 MiB under a 1MiB contract: %+v, want MemoryExceeded; log:\n%s", res, readLog(t, s))
	}
	if !strings.Contains(res.Message, "contract 1.0MiB") {
		t.Errorf("message %q does not name the contract", res.Message)
	}
}

// cgroupsOf returns the text of a /proc cgroup file, the lines of the
// hierarchies a batch group lives in only (memory, freezer, cpuacct).
func cgroupsOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" || c == "freezer" || c == "cpuacct" {
				keep = append(keep, line)
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}

// TestForkingThreadsComeBackHome: batches started from several goroutines
// at once (on v1 each forking thread passes through its batch's cgroups)
// leave every thread of the controller in the process's own cgroups, and
// each batch's command ran inside its own group.
func TestForkingThreadsComeBackHome(t *testing.T) {
	tree := testTree(t)
	if tree.Version() != 1 {
		t.Skip("cgroup v2 clones the child into its group: no thread moves")
	}
	home := cgroupsOf(t, "/proc/self/cgroup")
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 5 {
				s := cgSpec(t, tree, "sh", "-c", "cat /proc/self/cgroup")
				s.Task, s.BatchIndex = fmt.Sprintf("t%d", g), int64(i)
				s.LogPath = filepath.Join(s.RunDir, fmt.Sprintf("t%d-%d.log", g, i))
				b, err := Start(t.Context(), s)
				if err != nil {
					errs <- err
					return
				}
				if res := b.Wait(); res.ExitCode != 0 {
					errs <- fmt.Errorf("batch %d of t%d: %+v", i, g, res)
					return
				}
				if log := readLog(t, s); !inMemoryGroup(log, filepath.Base(b.cg.Dir())) {
					errs <- fmt.Errorf("batch %d of t%d did not run in its memory cgroup %s:\n%s", i, g, b.cg.Dir(), log)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	tasks, err := filepath.Glob("/proc/self/task/*/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range tasks {
		if got := cgroupsOf(t, path); got != home {
			t.Errorf("thread %s is in\n%s\nwant the process's\n%s", filepath.Base(filepath.Dir(path)), got, home)
		}
	}
}

// inMemoryGroup reports whether the /proc/PID/cgroup text in log puts the
// process in the memory cgroup named name.
func inMemoryGroup(log, name string) bool {
	for _, line := range strings.Split(log, "\n") {
		if _, path, ok := strings.Cut(line, ":memory:"); ok {
			return strings.HasSuffix(path, "/"+name)
		}
	}
	return false
}

// TestBatchCPUTimeIsMeasured: a batch whose command and a child of it burn
// CPU reports that CPU time, in a cgroup and under the sampler alike (v1
// groups have no cpuacct: the leader's rusage, its waited-for children
// included, gives it).
func TestBatchCPUTimeIsMeasured(t *testing.T) {
	burn := `i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done`
	for _, mode := range []string{"sampler", "cgroup"} {
		t.Run(mode, func(t *testing.T) {
			s := testSpec(t, "sh", "-c", burn+"; sh -c '"+burn+"'")
			if mode == "cgroup" {
				s.Cgroup = testTree(t)
			}
			started := time.Now()
			res := start(t, s).Wait()
			wall := time.Since(started)
			if res.ExitCode != 0 {
				t.Fatalf("%+v", res)
			}
			// Two CPU-bound loops: much of the wall time is CPU time,
			// even on a machine ten times oversubscribed.
			if res.CPUTime <= 0 || res.CPUTime < wall/10 || res.CPUTime > 2*wall {
				t.Errorf("CPU time %v for a CPU-bound batch of %v wall time", res.CPUTime, wall)
			}
		})
	}
}

// A batch's processes and threads are bounded (Spec.PidsMax): a loop that
// forks a hundred children gets no more than the bound, and the machine
// outside the batch is not touched.
func TestCgroupBoundsTheProcessesOfABatch(t *testing.T) {
	tree := testTree(t)
	s := cgSpec(t, tree, "sh", "-c", `n=0; for i in $(seq 100); do sleep 2 & n=$((n+1)); echo spawned $n; done 2>/dev/null; wait`)
	s.PidsMax = 20
	res := start(t, s).Wait()
	log := readLog(t, s)
	spawned := strings.Count(log, "spawned ")
	if spawned == 0 || spawned >= 20 {
		t.Errorf("%d children spawned under pids.max 20 (result %+v); log:\n%s", spawned, res, log)
	}
}

// rootCgroupProcs are the cgroup.procs files of the hierarchies' roots
// the tree's batches are in: where a root batch would move itself to
// escape its limits and its freezer.
func rootCgroupProcs(t *testing.T, tree *cgroup.Tree) string {
	t.Helper()
	if tree.Version() == 2 {
		return "/sys/fs/cgroup/cgroup.procs"
	}
	return "/sys/fs/cgroup/memory/cgroup.procs /sys/fs/cgroup/freezer/cgroup.procs"
}

// A batch whose process moves itself out of its cgroup (as root it may
// write any cgroup.procs) is killed, with what it started: its contract
// could not hold.
func TestABatchThatLeavesItsCgroupIsKilled(t *testing.T) {
	tree := testTree(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	// $$$$: the command's $$ (runner expands $(NAME), $$ escapes a $).
	s := cgSpec(t, tree, "sh", "-c", `for f in `+rootCgroupProcs(t, tree)+`; do echo $$$$ > $f; done; sleep 60 & echo $! > `+pidFile+`; wait`)
	res := start(t, s).Wait()
	if res.Reason != ReasonLeftCgroup {
		t.Fatalf("result %+v, want %s; log:\n%s", res, ReasonLeftCgroup, readLog(t, s))
	}
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			waitFor(t, "the leaver's child gone", func() bool { return !alive(pid) })
		}
	}
}

// A process that leaves the cgroup before any sample sees it (a child
// that moves itself at once, then the batch ends) does not outlive its
// batch: it still carries the batch's mark.
func TestAProcessThatLeftBeforeAnySampleDiesWithItsBatch(t *testing.T) {
	tree := testTree(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := cgSpec(t, tree, "sh", "-c", `sh -c 'for f in `+rootCgroupProcs(t, tree)+`; do echo $$$$ > $f; done; echo $$$$ > `+pidFile+`; exec setsid sleep 60' & sleep 0.2; exit 0`)
	s.SampleInterval = time.Hour // no sample after the first
	b := start(t, s)
	b.Wait()
	<-b.Done()
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the child never ran: %v; log:\n%s", err, readLog(t, s))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("pid %d, which left the cgroup, gone", pid), func() bool { return !alive(pid) })
}
