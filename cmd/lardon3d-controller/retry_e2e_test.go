package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestRetryRunsAFailedTaskAgainFromItsProgress: batch 0 succeeds, batch 1
// fails until a flag file exists; retry makes generation 2, which runs
// batch 1 alone and ends Done.
func TestRetryRunsAFailedTaskAgainFromItsProgress(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "flaky.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  # the shell's own script: batch 0 passes, batch 1 needs the flag file
  command: [sh, -c, 'echo $LARDON3D_BATCH_START >> runs.txt; test $LARDON3D_BATCH_START = 0 || test -f ok-flag']
  items: {count: 2}
  resources:
    batch: {min: 1, max: 1}
`)
	c := startController(t, spool)
	eventually(t, 30*time.Second, "flaky Failed", func() bool { return phaseOf(t, path) == v1alpha1.PhaseFailed })
	before := readTask(t, path)
	if before.Status.Progress.ItemsDone != 1 || before.Status.ObservedGeneration != 1 {
		t.Fatalf("before retry: %+v", before.Status)
	}
	if err := os.WriteFile(filepath.Join(spool, "ok-flag"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, "retry", "--spool", spool, "flaky")
	if code != 0 || out != "task flaky retried (generation 1 was Failed)\n" {
		t.Fatalf("retry: exit %d %q", code, out)
	}
	eventually(t, 30*time.Second, "flaky Done", func() bool { return phaseOf(t, path) == v1alpha1.PhaseDone })
	after := readTask(t, path)
	if after.Status.ObservedGeneration != 2 || after.Status.Progress.ItemsDone != 2 || !strings.HasPrefix(after.Spec.RetryToken, "retry-") {
		t.Fatalf("after retry: generation %d, progress %+v, token %q", after.Status.ObservedGeneration, after.Status.Progress, after.Spec.RetryToken)
	}
	if runs := string(mustRead(t, filepath.Join(spool, "runs.txt"))); runs != "0\n1\n1\n" {
		t.Errorf("batches run %q, want batch 0 once and batch 1 twice", runs)
	}
	// The file's own text is kept: the comment survives.
	if !strings.Contains(string(mustRead(t, path)), "# the shell's own script") {
		t.Error("retry lost the manifest's comment")
	}
	// An unknown name gets a suggestion.
	if out, code := runCLI(t, "retry", "--spool", spool, "flakey"); code != 1 || !strings.Contains(out, `did you mean "flaky"?`) {
		t.Errorf("retry of an unknown task: exit %d %q", code, out)
	}
	stopController(t, c)
}

// TestRetryRunsADoneTaskAgainFromItsFirstItem: retry NAME of a Done task
// runs every item again (a new generation from nothing, as an edit of a
// Done task), while retry --all leaves Done tasks alone.
func TestRetryRunsADoneTaskAgainFromItsFirstItem(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "twice.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'echo $LARDON3D_BATCH_START >> runs.txt']
  items: {count: 2}
  resources:
    batch: {min: 1, max: 1}
`)
	c := startController(t, spool)
	eventually(t, 30*time.Second, "twice Done", func() bool { return phaseOf(t, path) == v1alpha1.PhaseDone })
	if out, code := runCLI(t, "retry", "--spool", spool, "--all"); code != 0 || !strings.Contains(out, "No resources found") {
		t.Errorf("retry --all with only a Done task: exit %d %q", code, out)
	}
	out, code := runCLI(t, "retry", "--spool", spool, "twice")
	if code != 0 || out != "task twice retried (generation 1 was Done): it runs again from its first item\n" {
		t.Fatalf("retry of a Done task: exit %d %q", code, out)
	}
	eventually(t, 30*time.Second, "twice Done at generation 2", func() bool {
		task := readTask(t, path)
		return task.Status.ObservedGeneration == 2 && task.Status.Phase == v1alpha1.PhaseDone
	})
	if st := readTask(t, path).Status; st.Progress.ItemsDone != 2 || st.Progress.BatchesDone != 2 {
		t.Errorf("after retry: progress %+v", st.Progress)
	}
	if runs := string(mustRead(t, filepath.Join(spool, "runs.txt"))); runs != "0\n1\n0\n1\n" {
		t.Errorf("batches run %q, want both items twice", runs)
	}
	// A task that has not ended is refused, naming what retry takes.
	writeManifest(t, spool, "held.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  paused: true
  command: [sh, -c, 'true']
  items: {count: 1}
`)
	eventually(t, 30*time.Second, "held Pending", func() bool { return phaseOf(t, filepath.Join(spool, "held.yaml")) == v1alpha1.PhasePending })
	if out, code := runCLI(t, "retry", "--spool", spool, "held"); code != 1 || !strings.Contains(out, "task held is Pending: only a Failed, Rejected or Done task is retried") {
		t.Errorf("retry of a Pending task: exit %d %q", code, out)
	}
	stopController(t, c)
}
