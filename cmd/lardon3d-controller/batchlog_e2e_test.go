package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func TestParseBatchRuns(t *testing.T) {
	log := "before\n" +
		"=== batch 0 items 0..1 threads 1 memory 10MiB attempt 1 at 2026-12-01T10:00:00Z ===\nout 0\n=== batch 0 ended: exit code 1 after 5ms, peak memory 1MiB ===\n" +
		"=== batch 0 items 0..1 threads 1 memory 10MiB attempt 2 at 2026-12-01T10:00:01Z ===\nout 0 again\n=== batch 0 ended: exit code 0 after 5ms, peak memory 1MiB ===\n" +
		"=== batch 1 items 1..2 threads 2 memory 10MiB attempt 1 at 2026-12-01T10:00:02Z ===\n=== batch 7 ended: not mine ===\nstill running"
	runs := parseBatchRuns([]byte(log))
	if len(runs) != 3 || runs[0].End != "exit code 1 after 5ms, peak memory 1MiB" || runs[1].Attempt != 2 || runs[2].Threads != "2" || runs[2].End != "" {
		t.Fatalf("runs %+v", runs)
	}
	sec, ok := batchSection([]byte(log), 0)
	if !ok || strings.Count(string(sec), "=== batch 0 items") != 2 || strings.Contains(string(sec), "before") || strings.Contains(string(sec), "batch 1") {
		t.Fatalf("batch 0 section %q", sec)
	}
	if sec, _ := batchSection([]byte(log), 1); !strings.HasSuffix(string(sec), "still running") {
		t.Fatalf("batch 1 section %q", sec)
	}
	if _, ok := batchSection([]byte(log), 5); ok {
		t.Fatal("batch 5 found")
	}
	// A command that could not start ends its attempt.
	notFound := "=== batch 0 items 0..0 threads 1 memory 10MiB attempt 1 at 2026-12-01T10:00:00Z ===\n" +
		"=== batch 0 could not start: start batch 0 of t: command \"x\" not found in PATH ===\n"
	if runs := parseBatchRuns([]byte(notFound)); len(runs) != 1 || runs[0].End != `could not start: start batch 0 of t: command "x" not found in PATH` {
		t.Fatalf("could not start: %+v", runs)
	}
}

func TestDescribeListsEveryBatchAndLogsPrintsOne(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "three.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'echo "work on item $LARDON3D_BATCH_START"']
  items: {count: 3}
  resources:
    batch: {min: 1, max: 1}
`)
	c := startController(t, spool, "--exit-when-done")
	if code := c.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if phaseOf(t, path) != v1alpha1.PhaseDone {
		t.Fatal("not Done")
	}
	out, code := runCLI(t, "describe", "--spool", spool, "three")
	re := regexp.MustCompile(`(?s)Batches: +3 attempts in the log since the start, newest first.*\n  #2 .*attempt 1 at .*: exit code 0.*\n  #1 .*\n  #0 +items 0\.\.0 .*: exit code 0`)
	if code != 0 || !re.MatchString(out) {
		t.Fatalf("describe: exit %d\n%s", code, out)
	}
	out, code = runCLI(t, "logs", "--spool", spool, "three", "--batch", "1")
	if code != 0 || !strings.Contains(out, "work on item 1\n") || strings.Contains(out, "item 0") || strings.Contains(out, "item 2") ||
		!strings.HasPrefix(out, "=== batch 1 items") {
		t.Fatalf("logs --batch 1: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, "logs", "--spool", spool, "three", "--batch", "9"); code != 1 || !strings.Contains(out, "no batch 9") {
		t.Fatalf("logs --batch 9: exit %d %s", code, out)
	}
	if _, code := runCLI(t, "logs", "--spool", spool, "three", "--batch", "1", "-f"); code != 2 {
		t.Fatalf("--batch with -f: exit %d", code)
	}
}
