package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// needCgroups fails the test unless the controller can give batches
// cgroups here: it runs the controller with --cgroups required once.
func needCgroups(t *testing.T) {
	t.Helper()
	spool := newSpool(t)
	out, code := runCLI(t, "run", "--spool", spool, "--cgroups", "required", "--exit-when-done", "--log-format", "json")
	if code != 0 && strings.Contains(out, "no usable memory cgroup") {
		t.Skipf("no memory cgroup can be created on this machine: %s", tail(out, 400))
	}
	if code != 0 {
		t.Fatalf("controller with --cgroups required on an empty spool: exit %d\n%s", code, out)
	}
}

// pidsRunning returns the live processes whose command line is exactly argv.
func pidsRunning(argv ...string) []int {
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Equal(cmdline, want) && procState(pid) != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}

// escapers is a batch whose processes leave its process group and session
// (one with a cleared environment too), with durations unique to the test.
func escapers(base int) string {
	return fmt.Sprintf(`setsid sh -c "exec sleep %d" & env -i setsid sleep %d & sleep %d`, base+1, base+2, base)
}

// escaperBase picks sleep durations no other run of the test uses, and
// kills whatever carries them when the test ends (the harness ends
// controllers with SIGKILL, which leaves their batches behind).
func escaperBase(t *testing.T, n int) int {
	base := 100000 + (os.Getpid()%10000)*100 + n*10
	t.Cleanup(func() {
		for _, d := range []int{base, base + 1, base + 2} {
			for _, pid := range pidsRunning("sleep", strconv.Itoa(d)) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return base
}

// writeEscapers drops a task running escapers(base) into spool.
func writeEscapers(t *testing.T, spool string, base int) string {
	t.Helper()
	return writeManifest(t, spool, "escape.yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, '%s']
  items: {count: 1}
`, escapers(base)))
}

func escaperPids(base int) []int {
	var pids []int
	for _, d := range []int{base + 1, base + 2} {
		pids = append(pids, pidsRunning("sleep", strconv.Itoa(d))...)
	}
	return pids
}

func TestDeletedTaskLeavesNoProcessEvenAfterSetsid(t *testing.T) {
	needCgroups(t)
	spool := newSpool(t)
	base := escaperBase(t, 1)
	path := writeEscapers(t, spool, base)
	startController(t, spool, "--cgroups", "required")
	eventually(t, 20*time.Second, "both escaped sleepers", func() bool { return len(escaperPids(base)) == 2 })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// --delete-grace (3 s) for an editor's save, then the kill grace (2 s).
	deadline := time.Now().Add(3*time.Second + 2*time.Second + 3*time.Second)
	eventually(t, time.Until(deadline), "the escaped sleepers to die with their task", func() bool {
		return len(escaperPids(base)) == 0
	})
}

func TestRestartAfterKill9KillsWhatLeftTheSession(t *testing.T) {
	needCgroups(t)
	spool := newSpool(t)
	base := escaperBase(t, 2)
	path := writeEscapers(t, spool, base)
	c := startController(t, spool, "--cgroups", "required")
	eventually(t, 20*time.Second, "both escaped sleepers", func() bool { return len(escaperPids(base)) == 2 })
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	time.Sleep(200 * time.Millisecond)
	leftovers := append(escaperPids(base), pidsRunning("sleep", strconv.Itoa(base))...)
	if len(leftovers) != 3 {
		t.Fatalf("%d sleepers after kill -9, want 3: the test no longer reproduces a leftover", len(leftovers))
	}
	// Another user's process that happens to carry this controller's state
	// directory (a batch reproduced by hand in their shell) is not ours.
	other := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"env", "LARDON3D_STATE_DIR="+filepath.Join(spool, ".lardon3d"), "sleep", strconv.Itoa(base+3))
	if err := other.Start(); err != nil {
		t.Fatalf("setpriv (util-linux) is needed to start another user's process: %v", err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	startController(t, spool, "--cgroups", "required")
	// The task runs again (new sleepers): the old ones must be gone.
	eventually(t, 20*time.Second, "the restarted controller to kill the leftovers", func() bool {
		for _, pid := range leftovers {
			if st := procState(pid); st != 0 && st != 'Z' {
				return false
			}
		}
		return true
	})
	eventually(t, 20*time.Second, "the task to run again", func() bool { return phaseOf(t, path) == v1alpha1.PhaseRunning })
	if st := procState(other.Process.Pid); st == 0 || st == 'Z' {
		t.Errorf("another user's process carrying the state directory was killed by the restart")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the second run's sleepers to die with their task", func() bool {
		return len(escaperPids(base)) == 0 && len(pidsRunning("sleep", strconv.Itoa(base))) == 0
	})
}

func TestAllocatorThatLeftItsGroupExceedsItsContract(t *testing.T) {
	needCgroups(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 is needed: %v", err)
	}
	spool := newSpool(t)
	path := writeManifest(t, spool, "setsid.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [setsid, -w, python3, -c, 'import time; b = bytearray(b"x") * (600 << 20); time.sleep(1)']
  items: {count: 1}
  resources:
    fixed: {memory: 20Mi}
`)
	c := startController(t, spool, "--cgroups", "required", "--exit-when-done", "--memory-capacity", "1Gi")
	c.wait(t, 60*time.Second)
	task := readTask(t, path)
	if task.Status.Phase == v1alpha1.PhaseDone {
		t.Fatalf("a 600 MiB batch under a 20Mi contract ended Done")
	}
	lb := task.Status.LastBatch
	if lb == nil || lb.Reason != v1alpha1.ReasonMemoryExceeded {
		t.Fatalf("last batch %+v, want MemoryExceeded", lb)
	}
	// Retried under its measured need until the machine cannot grant it,
	// each attempt stopped at its limit: never the 600 MiB it wanted.
	if task.Status.Phase != v1alpha1.PhaseFailed || lb.PeakMemory == nil || lb.PeakMemory.Value() >= 600<<20 {
		t.Errorf("phase %s, last peak %v; want Failed with every attempt stopped below 600 MiB", task.Status.Phase, lb.PeakMemory)
	}
}

// memoryCgroupDir returns the directory of the memory cgroup (v1, or the
// unified hierarchy) a /proc/PID/cgroup text puts a process in, from this
// process's mount table.
func memoryCgroupDir(t *testing.T, procCgroup string) string {
	t.Helper()
	fstype, path := "", ""
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		switch {
		case len(parts) != 3:
		case strings.Contains(","+parts[1]+",", ",memory,"):
			fstype, path = "cgroup", parts[2]
		case parts[0] == "0" && parts[1] == "" && fstype == "":
			fstype, path = "cgroup2", parts[2]
		}
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != fstype || (fstype == "cgroup" && !strings.Contains(","+g[2]+",", ",memory,")) {
			continue
		}
		rel, err := filepath.Rel(f[3], path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		return filepath.Join(f[4], rel)
	}
	t.Fatalf("no memory hierarchy mounted holds the batch's cgroup:\n%s", procCgroup)
	return ""
}

// TestACleanRunLeavesNoCgroup: a run that ends (--exit-when-done) removes
// the subtree it made for its batches' cgroups, with every group in it:
// nothing piles up, one subtree per state directory ever used.
func TestACleanRunLeavesNoCgroup(t *testing.T) {
	needCgroups(t)
	spool := newSpool(t)
	seen := filepath.Join(t.TempDir(), "cgroup")
	writeManifest(t, spool, "where.yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'cat /proc/self/cgroup > %s']
  items: {count: 1}
`, seen))
	if out, code := runCLI(t, "run", "--spool", spool, "--cgroups", "required", "--exit-when-done"); code != 0 {
		t.Fatalf("exit %d\n%s", code, tail(out, 2000))
	}
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	group := memoryCgroupDir(t, string(b))
	subtree := filepath.Dir(group)
	if !strings.HasPrefix(filepath.Base(subtree), "lardon3d-") {
		t.Fatalf("the batch ran in %s, not in a group of the controller's subtree", group)
	}
	if _, err := os.Stat(subtree); !os.IsNotExist(err) {
		t.Errorf("the run left its cgroup subtree %s behind (stat: %v)", subtree, err)
	}
}
