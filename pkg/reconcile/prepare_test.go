package reconcile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// A batch whose log cannot be opened (here a directory in its place; a
// full or read-only state disk fails the same open) is not a failure of
// the task: it waits Pending with the reason shown, and runs once the log
// can be made, though it has no retries.
func TestABatchThatCannotBePreparedWaitsAndRunsLater(t *testing.T) {
	h := newHarness(t, Config{Queue: queue.Config{RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond}})
	blocker := filepath.Join(h.dir, StateDirName, "logs", "a.log")
	if err := os.MkdirAll(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	h.write("a.yaml", manifest("a", "true", "  retries: 0\n"))
	h.start()
	h.eventually("a Pending, PrepareFailed", func() bool {
		st := h.status("a.yaml")
		for _, c := range st.Conditions {
			if c.Reason == queue.ReasonPrepareFailed && strings.Contains(c.Message, "a.log") {
				return st.Phase == v1alpha1.PhasePending
			}
		}
		return false
	})
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	h.eventually("a Done", func() bool { return h.status("a.yaml").Phase == v1alpha1.PhaseDone })
	if st := h.status("a.yaml"); st.Progress.ItemsDone != 4 {
		t.Errorf("a: %d items done, want 4", st.Progress.ItemsDone)
	}
}
