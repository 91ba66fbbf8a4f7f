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
	// A Done task is not retried; an unknown name gets a suggestion.
	if out, code := runCLI(t, "retry", "--spool", spool, "flaky"); code != 1 || !strings.Contains(out, "task flaky is Done: only a Failed or Rejected task is retried") {
		t.Errorf("retry of a Done task: exit %d %q", code, out)
	}
	if out, code := runCLI(t, "retry", "--spool", spool, "flakey"); code != 1 || !strings.Contains(out, `did you mean "flaky"?`) {
		t.Errorf("retry of an unknown task: exit %d %q", code, out)
	}
	stopController(t, c)
}
