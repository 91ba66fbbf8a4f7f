package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestGetWatchPrintsOnlyChangedRows: the table once, then one row per
// change, as kubectl get -w does; nothing when a file is rewritten as is.
func TestGetWatchPrintsOnlyChangedRows(t *testing.T) {
	spool := newSpool(t)
	a := writeManifest(t, spool, "alpha.yaml", strings.ReplaceAll(validManifest, "%NAME%", "alpha"))
	out, _ := startCLI(t, "get", "-w", "--spool", spool)
	// What get says on stderr of the spool nobody serves is not a row.
	rows := func() string {
		var keep []string
		for _, l := range strings.SplitAfter(out.String(), "\n") {
			if !strings.HasPrefix(l, "no controller is running on ") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "")
	}
	eventually(t, 10*time.Second, "the first table", func() bool { return strings.Count(rows(), "\n") == 2 })
	if !regexp.MustCompile(`^NAME\s+PHASE.*\nalpha\s+New\s`).MatchString(rows()) {
		t.Fatalf("first table:\n%s", rows())
	}
	// Rewritten unchanged: nothing printed (the 2 s tick included).
	if err := os.WriteFile(a, mustRead(t, a), 0o600); err != nil {
		t.Fatal(err)
	}
	b := writeManifest(t, spool, "beta.yaml", strings.ReplaceAll(validManifest, "%NAME%", "beta"))
	eventually(t, 10*time.Second, "beta's row", func() bool { return strings.Count(rows(), "\n") >= 3 })
	time.Sleep(2500 * time.Millisecond)
	lines := strings.Split(strings.TrimSuffix(rows(), "\n"), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^beta\s+New\s`).MatchString(lines[2]) {
		t.Fatalf("after adding beta, want one more row:\n%s", rows())
	}
	// A changed status: that row alone.
	writeManifest(t, spool, "alpha.yaml", strings.ReplaceAll(validManifest, "%NAME%", "alpha")+"status:\n  phase: Failed\n")
	eventually(t, 10*time.Second, "alpha's new row", func() bool { return strings.Count(rows(), "\n") >= 4 })
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "beta deleted", func() bool { return strings.Count(rows(), "\n") >= 5 })
	lines = strings.Split(strings.TrimSuffix(rows(), "\n"), "\n")
	if len(lines) != 5 || !regexp.MustCompile(`^alpha\s+Failed\s`).MatchString(lines[3]) || !regexp.MustCompile(`^beta\s+Deleted\s`).MatchString(lines[4]) {
		t.Fatalf("rows after the changes:\n%s", rows())
	}
	// The rows line up with the header.
	if strings.Index(lines[0], "PHASE") != strings.Index(lines[4], "Deleted") {
		t.Errorf("columns do not line up:\n%s", rows())
	}
	// A file that stays unparseable is shown, once.
	writeManifest(t, spool, "broken.yaml", "kind: [\n")
	eventually(t, 10*time.Second, "broken's row", func() bool { return strings.Count(rows(), "\n") >= 6 })
	time.Sleep(2500 * time.Millisecond)
	lines = strings.Split(strings.TrimSuffix(rows(), "\n"), "\n")
	if len(lines) != 6 || !regexp.MustCompile(`^broken\s+Invalid\s.*not parseable YAML`).MatchString(lines[5]) {
		t.Fatalf("after a broken file:\n%s", rows())
	}
}

// TestGetWatchNeverPrintsARowTwice (issue 33, point 8): through a real
// controller's run — batches reporting progress, a pause and a resume,
// status writes of all kinds — get -w never prints a task's row
// identical to the row it printed last for that task.
func TestGetWatchNeverPrintsARowTwice(t *testing.T) {
	spool := newSpool(t)
	steps := writeManifest(t, spool, "steps.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'echo LARDON3D_PROGRESS 0; sleep 0.2; echo LARDON3D_PROGRESS 1; sleep 0.2']
  items: {count: 6}
  resources: {fixed: {memory: 8Mi}, batch: {max: 2}}
`)
	held := writeManifest(t, spool, "held.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  paused: true
  command: [sh, -c, 'sleep 0.3']
  items: {count: 2}
  resources: {fixed: {memory: 8Mi}, batch: {max: 1}}
`)
	cmd := exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), "get", "-w", "--spool", spool)
	cmd.Env = isolated(os.Environ(), spool)
	out := &syncBuffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	eventually(t, 10*time.Second, "the first table", func() bool { return strings.Count(out.String(), "\n") >= 3 })
	startController(t, spool)
	eventually(t, 30*time.Second, "held Pending", func() bool { return phaseOf(t, held) == v1alpha1.PhasePending })
	if out, code := runCLI(t, "resume", "--spool", spool, "held"); code != 0 {
		t.Fatalf("resume: exit %d %s", code, out)
	}
	eventually(t, 60*time.Second, "both Done", func() bool {
		return phaseOf(t, steps) == v1alpha1.PhaseDone && phaseOf(t, held) == v1alpha1.PhaseDone
	})
	time.Sleep(2500 * time.Millisecond) // a tick of get -w's relisting
	last := map[string]string{}
	rows := 0
	for _, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")[1:] {
		name, _, _ := strings.Cut(line, " ")
		line = strings.TrimRight(line, " ")
		if line == last[name] {
			t.Errorf("get -w printed %s's row twice in a row: %q\n%s", name, line, out.String())
		}
		last[name] = line
		rows++
	}
	if !regexp.MustCompile(`(?m)^steps\s+Done\s`).MatchString(out.String()) || !regexp.MustCompile(`(?m)^held\s+Done\s`).MatchString(out.String()) || rows < 6 {
		t.Errorf("get -w did not follow the run (%d rows):\n%s", rows, out.String())
	}
}
