package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTopShowsWhatARunningBatchUsesAgainstItsContract: a batch that holds
// 64Mi and burns CPU shows up with its processes, its memory against a
// 256Mi contract and a CPU use above zero.
func TestTopShowsWhatARunningBatchUsesAgainstItsContract(t *testing.T) {
	spool := newSpool(t)
	if out, code := runCLI(t, "top", "--spool", spool); code != 0 || out != "No batch is running.\n" {
		t.Fatalf("top on an idle spool: exit %d %q", code, out)
	}
	path := writeManifest(t, spool, "busy.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [lardon3d-synth, --fixed, 64Mi, --cpu-per-item, 60s]
  items: {count: 1}
  resources:
    fixed: {memory: 256Mi}
`)
	c := startController(t, spool)
	waitRunning(t, path)
	eventually(t, 20*time.Second, "the process group recorded", func() bool { return readTask(t, path).Status.ProcessGroup != nil })
	row := regexp.MustCompile(`(?m)^busy\s+Running\s+1/1\s+(\d+)\s+(\S+)\s+256\.0MiB\s+(\d+)%\s+([0-9.]+)\s+1\s+(\d+)%$`)
	var m []string
	eventually(t, 20*time.Second, "top to see the batch's memory", func() bool {
		out, code := runCLI(t, "top", "--spool", spool, "--interval", "500ms")
		if m = row.FindStringSubmatch(out); code != 0 || m == nil {
			t.Logf("top: exit %d\n%s", code, out)
			return false
		}
		pct, _ := strconv.Atoi(m[3])
		return pct >= 25 // 64Mi touched of 256Mi, once the synth has allocated
	})
	if procs, _ := strconv.Atoi(m[1]); procs < 1 {
		t.Errorf("procs %s", m[1])
	}
	if cpu, _ := strconv.ParseFloat(m[4], 64); cpu <= 0 {
		t.Errorf("cpu %s: the batch burns CPU", m[4])
	}
	if out, code := runCLI(t, "top", "--spool", spool, "bussy"); code != 1 || !strings.Contains(out, `did you mean "busy"?`) {
		t.Errorf("top bussy: exit %d %s", code, out)
	}
	stopController(t, c)
}

// TestTopCountsProcessesThatLeftTheSession: with cgroups, a process the
// batch started with setsid is the batch's in top, as in enforcement.
func TestTopCountsProcessesThatLeftTheSession(t *testing.T) {
	needCgroups(t)
	spool := newSpool(t)
	base := escaperBase(t, 3)
	path := writeEscapers(t, spool, base)
	startController(t, spool, "--cgroups", "required")
	waitRunning(t, path)
	eventually(t, 20*time.Second, "both escaped sleepers", func() bool { return len(escaperPids(base)) == 2 })
	eventually(t, 20*time.Second, "the status to name the batch's cgroup", func() bool {
		pg := readTask(t, path).Status.ProcessGroup
		return pg != nil && pg.Cgroup != ""
	})
	// sh, its sleep, and the two that left the session: 4 (the process
	// group alone has 2).
	row := regexp.MustCompile(`(?m)^escape\s+Running\s+\S+\s+(\d+)\s`)
	out, code := runCLI(t, "top", "--spool", spool, "--interval", "100ms")
	m := row.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("top: exit %d\n%s", code, out)
	}
	if m[1] != "4" {
		t.Errorf("top counts %s processes, want 4 (the cgroup's):\n%s", m[1], out)
	}
}
