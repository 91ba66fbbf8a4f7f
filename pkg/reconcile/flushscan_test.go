package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// tallySpool takes every status write and counts it per path.
type tallySpool struct{ writes map[string]int }

func (s *tallySpool) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (s *tallySpool) Events() <-chan spool.Event    { return nil }
func (s *tallySpool) WriteStatus(path string, _ *v1alpha1.TaskStatus) error {
	s.writes[path]++
	return nil
}

// TestFlushWritesWhatIsDueAndLooksAtLittleElse drives flush directly
// through a fixed-seed random sequence of marks (phase changes, progress,
// batch commits, fresh queued tasks) and clock steps, against a reference
// that computes every dirty status's due time at each flush:
//   - every status due is written by that flush, and none that is not;
//   - the wait flush returns is no later than the earliest write left;
//   - flush looks at a few queued items per mark or write, not at every
//     dirty status at every call: thousands of queued tasks waiting for
//     QueuedWriteDelay are not walked at every event.
func TestFlushWritesWhatIsDueAndLooksAtLittleElse(t *testing.T) {
	rec := &tallySpool{writes: map[string]int{}}
	gov := governor.New(governor.Config{MemoryReserved: -1})
	t.Cleanup(func() { _ = gov.Close() })
	c := New(Config{SpoolDir: t.TempDir(), QueuedWriteDelay: 3 * time.Second}, Deps{Spool: rec, Governor: gov, Logger: zerolog.Nop()})
	var es []*entry
	for i := range 40 {
		e := &entry{path: fmt.Sprintf("/spool/t%02d.yaml", i), name: fmt.Sprintf("t%02d", i), task: &v1alpha1.Task{}}
		c.entries[e.path] = e
		es = append(es, e)
	}
	rng := rand.New(rand.NewPCG(15, 2026))
	now := time.Now()
	marks, writes := 0, 0
	mark := func(e *entry, urgent bool) {
		marks++
		c.markDirty(e, false)
		if urgent && e.urgentAt.IsZero() {
			e.urgentAt = now // markDirty's clock is the wall's; the test's is now
		}
	}
	for step := range 5000 {
		e := es[rng.IntN(len(es))]
		if i := rng.IntN(len(es)); i >= 30 && es[i].lastWrite.IsZero() && rng.IntN(4) == 0 {
			// Requeued before its first write (an edit of a manifest
			// still waiting): due later than its queued item says.
			mark(es[i], true)
			es[i].urgentAt, es[i].queuedUntil = time.Time{}, now.Add(c.cfg.QueuedWriteDelay)
		}
		switch action := rng.IntN(6); {
		case e == es[len(es)-1] || e == es[len(es)-2]:
			// Two tasks only ever wait, requeued now and then.
			now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
		case action == 0:
			mark(e, true)
		case action == 1:
			mark(e, false)
		case action == 2:
			mark(e, true)
			e.commit = true
		case action == 3:
			if e.lastWrite.IsZero() {
				mark(e, true)
				e.urgentAt, e.queuedUntil = time.Time{}, now.Add(c.cfg.QueuedWriteDelay)
			}
		default:
			now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
		due := map[string]bool{}
		var earliest time.Time
		for path := range c.dirty {
			e := c.entries[path]
			if at := c.dueAt(e, now); !now.Before(at) {
				due[path] = true
			} else if earliest.IsZero() || at.Before(earliest) {
				earliest = at
			}
		}
		before := map[string]int{}
		for path, n := range rec.writes {
			before[path] = n
		}
		wait := c.flush(now, false)
		for _, e := range es {
			wrote := rec.writes[e.path] > before[e.path]
			if wrote != due[e.path] {
				t.Fatalf("step %d: %s written %v, due %v", step, e.name, wrote, due[e.path])
			}
			if wrote {
				writes++
			}
		}
		if !earliest.IsZero() && (wait <= 0 || now.Add(wait).After(earliest)) {
			t.Fatalf("step %d: flush waits %v, the next write is due in %v", step, wait, earliest.Sub(now))
		}
	}
	if c.duePopped > 3*(marks+writes) {
		t.Errorf("flush looked at %d queued items for %d marks and %d writes", c.duePopped, marks, writes)
	}
}

// diskFullSpool fails the writes of the paths in fail.
type diskFullSpool struct {
	tallySpool
	fail map[string]bool
}

func (s *diskFullSpool) WriteStatus(path string, st *v1alpha1.TaskStatus) error {
	if s.fail[path] {
		return fmt.Errorf("disk full")
	}
	return s.tallySpool.WriteStatus(path, st)
}

// TestFlushBoundsEachPassAndRetriesFailures: 200 batch commits due at
// once are written flushMax at a time, each pass asking for the next one
// within a millisecond; a failed write is tried again at its backoff, not
// before, and lands once the disk takes it.
func TestFlushBoundsEachPassAndRetriesFailures(t *testing.T) {
	rec := &diskFullSpool{tallySpool: tallySpool{writes: map[string]int{}}, fail: map[string]bool{}}
	gov := governor.New(governor.Config{MemoryReserved: -1})
	t.Cleanup(func() { _ = gov.Close() })
	c := New(Config{SpoolDir: t.TempDir()}, Deps{Spool: rec, Governor: gov, Logger: zerolog.Nop()})
	var es []*entry
	for i := range 200 {
		e := &entry{path: fmt.Sprintf("/spool/t%03d.yaml", i), name: fmt.Sprintf("t%03d", i), task: &v1alpha1.Task{}}
		c.entries[e.path] = e
		es = append(es, e)
		c.markDirty(e, true)
		e.commit = true
	}
	rec.fail[es[7].path] = true
	now := time.Now()
	// 64 tried a pass (the failing one among them in one pass): 64 or 63
	// written by each of the first three, the last 8 or 7.
	total := 0
	for pass := range 4 {
		before := len(rec.writes)
		wait := c.flush(now, false)
		got := len(rec.writes) - before
		total += got
		if lo, hi := 63, 64; (pass < 3 && (got < lo || got > hi)) || (pass == 3 && (got < 7 || got > 8)) {
			t.Fatalf("pass %d wrote %d statuses, want at most flushMax (%d) of what is due", pass, got, flushMax)
		}
		if pass < 3 && wait != time.Millisecond {
			t.Errorf("pass %d: next in %v, want 1ms (more are due)", pass, wait)
		}
	}
	if total != 199 {
		t.Fatalf("%d statuses written, want 199", total)
	}
	if rec.writes[es[7].path] != 0 || len(c.dirty) != 1 {
		t.Fatalf("after the passes: %d dirty, the failing one written %d times", len(c.dirty), rec.writes[es[7].path])
	}
	retry := es[7].retryAt
	if retry.IsZero() {
		t.Fatal("no retry set for the failed write")
	}
	if n := len(rec.writes); c.flush(retry.Add(-time.Millisecond), false) <= 0 || len(rec.writes) != n {
		t.Error("the failed write was retried before its backoff")
	}
	rec.fail = map[string]bool{}
	c.flush(retry, false)
	if rec.writes[es[7].path] != 1 || len(c.dirty) != 0 {
		t.Errorf("at its retry: written %d times, %d still dirty", rec.writes[es[7].path], len(c.dirty))
	}
}
