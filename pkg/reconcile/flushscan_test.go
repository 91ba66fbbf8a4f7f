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

// TestFlushWritesWhatIsDueAndScansOnlyThen drives flush directly through a
// fixed-seed random sequence of marks (phase changes, progress, batch
// commits, fresh queued tasks) and clock steps, against a reference that
// computes every dirty status's due time at each flush:
//   - every status due is written by that flush, and none that is not;
//   - the wait flush returns is no later than the earliest write left;
//   - a flush at which nothing is due does not scan the dirty statuses
//     once an earlier scan bounded when the next write is: thousands of
//     queued tasks waiting for QueuedWriteDelay are not walked at every
//     event.
func TestFlushWritesWhatIsDueAndScansOnlyThen(t *testing.T) {
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
	mark := func(e *entry, urgent bool) {
		c.markDirty(e, false)
		if urgent && e.urgentAt.IsZero() {
			e.urgentAt = now // markDirty's clock is the wall's; the test's is now
		}
	}
	idle, idleScans := 0, 0
	for step := range 5000 {
		switch e := es[rng.IntN(len(es))]; rng.IntN(6) {
		case 0:
			mark(e, true)
		case 1:
			mark(e, false)
		case 2:
			mark(e, true)
			e.commit = true
		case 3:
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
		bounded, scans := !c.flushAt.IsZero(), c.scans
		wait := c.flush(now, false)
		for _, e := range es {
			wrote := rec.writes[e.path] > before[e.path]
			if wrote != due[e.path] {
				t.Fatalf("step %d: %s written %v, due %v", step, e.name, wrote, due[e.path])
			}
		}
		if !earliest.IsZero() && (wait <= 0 || now.Add(wait).After(earliest)) {
			t.Fatalf("step %d: flush waits %v, the next write is due in %v", step, wait, earliest.Sub(now))
		}
		if len(due) == 0 && bounded {
			idle++
			if c.scans > scans {
				idleScans++
			}
		}
	}
	if idle < 1000 || idleScans > 0 {
		t.Errorf("%d of %d flushes with nothing due and a known bound scanned every dirty status", idleScans, idle)
	}
}
