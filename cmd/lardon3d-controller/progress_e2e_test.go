package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestProgressInsideABatch: one long batch whose command prints
// LARDON3D_PROGRESS lines is not 0/8 until it ends: the status, get and
// describe show the items it reports, growing, while it runs; none of them
// is committed before it exits 0, and once it did the report is gone.
func TestProgressInsideABatch(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "long.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: long}
spec:
  command: [sh, -c, 'i=0; while [ $i -lt $LARDON3D_BATCH_SIZE ]; do sleep 0.4; i=$((i+1)); echo "LARDON3D_PROGRESS $i"; done']
  items: {count: 8}
  resources: {fixed: {memory: 16Mi}, batch: {min: 8, max: 8}}
`)
	c := startController(t, spool, "--exit-when-done")
	var seen []int64
	checkedCLI := false
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out; reports seen %v", seen)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		task, _ := v1alpha1.ParseManifest(filepath.Base(path), data)
		if task == nil {
			continue
		}
		st := task.Status
		if v1alpha1.IsTerminal(st.Phase) && st.Phase != v1alpha1.PhaseDone {
			t.Fatalf("%s: %+v", st.Phase, st.Conditions)
		}
		if st.Phase == v1alpha1.PhaseDone {
			if lb := st.LastBatch; lb == nil || lb.ItemsReported != nil {
				t.Fatalf("Done with last batch %+v: the report outlived its batch", lb)
			}
			break
		}
		if lb := st.LastBatch; lb != nil && lb.ItemsReported != nil {
			if st.Progress.ItemsDone != 0 {
				t.Fatalf("%d items committed while the batch runs", st.Progress.ItemsDone)
			}
			n := *lb.ItemsReported
			if len(seen) == 0 || seen[len(seen)-1] != n {
				seen = append(seen, n)
			}
			if n >= 2 && n < 6 && !checkedCLI {
				checkedCLI = true
				if out, code := runCLI(t, "get", "--spool", spool); code != 0 || !strings.Contains(out, "0/8 +") {
					t.Errorf("get (exit %d) while 0/8 +%d: %s", code, n, out)
				}
				if out, code := runCLI(t, "describe", "--spool", spool, "long"); code != 0 || !strings.Contains(out, "Running batch:") || !strings.Contains(out, "ETA:") {
					t.Errorf("describe (exit %d) while %d reported:\n%s", code, n, out)
				}
			}
		}
	}
	if code := c.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	reports := seen
	t.Logf("reports seen while the batch ran: %v", reports)
	if !checkedCLI {
		t.Errorf("get and describe were never checked while 2..5 items were reported (reports %v)", reports)
	}
	if len(reports) < 3 {
		t.Fatalf("saw reports %v while the batch ran, want at least 3 distinct", reports)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i] < reports[i-1] {
			t.Fatalf("reports went back: %v", reports)
		}
	}
	if task := readTask(t, path); task.Status.Progress.ItemsDone != 8 {
		t.Fatalf("progress %+v, want 8 done", task.Status.Progress)
	}
}
