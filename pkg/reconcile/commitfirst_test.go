package reconcile

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// blockingSpool holds every status write that commits items, until
// released.
type blockingSpool struct {
	Spool
	release chan struct{}
	once    sync.Once
	held    chan struct{} // closed when a commit write is first held
}

func (s *blockingSpool) WriteStatus(path string, st *v1alpha1.TaskStatus) error {
	if st.Progress.ItemsDone > 0 {
		s.once.Do(func() { close(s.held) })
		<-s.release
	}
	return s.Spool.WriteStatus(path, st)
}

// With CommitBeforeNextBatch (the node agent), a task's second batch does
// not start while the status committing its first is not written; without
// it (the spool mode), it does not wait for the write.
func TestCommitBeforeNextBatch(t *testing.T) {
	for _, commitFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "commit-first", false: "spool-mode"}[commitFirst], func(t *testing.T) {
			h := newHarness(t, Config{CommitBeforeNextBatch: commitFirst})
			bs := &blockingSpool{release: make(chan struct{}), held: make(chan struct{})}
			h.wrap = func(s Spool) Spool { bs.Spool = s; return bs }
			out := filepath.Join(t.TempDir(), "out")
			h.write("t.yaml", countManifest("t", "T", out, 3, ""))
			h.start()
			select {
			case <-bs.held:
			case <-time.After(20 * time.Second):
				t.Fatal("the first batch's commit was never written")
			}
			// The write committing batch 0 is held: batch 1 may start only
			// without the barrier.
			time.Sleep(500 * time.Millisecond)
			started := countMark(t, out, "T")
			close(bs.release)
			if commitFirst && started != 1 {
				t.Fatalf("%d batches started before the first one's commit was written, want 1", started)
			}
			if !commitFirst && started < 2 {
				t.Fatalf("%d batches started while the commit write was held: the spool mode should not wait", started)
			}
			h.eventually("Done", func() bool { return h.status("t.yaml").Phase == v1alpha1.PhaseDone })
			if n := countMark(t, out, "T"); n != 3 {
				t.Fatalf("%d batches ran, want 3", n)
			}
		})
	}
}
