package reconcile

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// review: a known task whose file an edit breaks (unparseable YAML) keeps
// running, and the file is picked up again once fixed (handleFile's rule).
// The next status write, a commit point, found the broken file
// (ErrNotRewritable) and the controller took that for "this manifest can
// never hold a status": it cancelled the task, killing its batch, and
// dropped the commit.
func TestReviewABrokenEditDoesNotCancelARunningTask(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	out := filepath.Join(t.TempDir(), "out")
	good := fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec:\n"+
		"  command: [sh, -c, 'echo T $LARDON3D_BATCH_START >> %s; sleep 0.2']\n  items: {count: 6}\n  resources: {batch: {max: 1}}\n", out)
	h.write("t.yaml", good)
	h.start()
	h.eventually("running, its status in the file", func() bool {
		return countMark(t, out, "T") >= 1 && h.status("t.yaml").Phase == v1alpha1.PhaseRunning
	})
	// An edit saved half-way: not YAML any more.
	h.write("t.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec: [unclosed\n")
	cancelled := func() bool {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		return strings.Contains(logs.buf.String(), "task cancelled")
	}
	h.eventually("every batch run, or the task cancelled", func() bool { return countMark(t, out, "T") >= 6 || cancelled() })
	if cancelled() {
		t.Fatalf("the running task was cancelled because its file was broken for a moment (%d of 6 batches ran)", countMark(t, out, "T"))
	}
	h.write("t.yaml", good)
	h.eventually("Done in the file", func() bool {
		st := h.status("t.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.Progress.ItemsDone == 6
	})
	if n := countMark(t, out, "T"); n != 6 {
		t.Errorf("%d batches ran, want 6", n)
	}
	checkTransitions(t, logs)
}
