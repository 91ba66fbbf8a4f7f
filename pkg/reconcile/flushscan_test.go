package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
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

// testWriter is a status writer driven by the test's goroutine (no run).
func testWriter(t *testing.T, sp Spool) *statusWriter {
	return newStatusWriter(sp, writeTiming{progress: 250 * time.Millisecond, phaseDelay: 10 * time.Millisecond}, noMetrics{}, zerolog.Nop(), t.TempDir())
}

// TestWriterWritesWhatIsDueAndLooksAtLittleElse drives the writer's pass
// directly through a fixed-seed random sequence of requests (phase
// changes, progress, batch commits, fresh queued tasks) and clock steps,
// against a reference that computes every dirty status's due time at
// each pass:
//   - every status due is written by that pass, and none that is not;
//   - the wait a pass returns is no later than the earliest write left;
//   - a pass looks at a few queued items per request or write, not at
//     every dirty status each time: thousands of queued tasks waiting for
//     QueuedWriteDelay are not walked at every event.
func TestWriterWritesWhatIsDueAndLooksAtLittleElse(t *testing.T) {
	rec := &tallySpool{writes: map[string]int{}}
	w := testWriter(t, rec)
	const queuedDelay = 3 * time.Second
	var paths []string
	for i := range 40 {
		paths = append(paths, fmt.Sprintf("/spool/t%02d.yaml", i))
	}
	rng := rand.New(rand.NewPCG(15, 2026))
	now := time.Now()
	marks, writes := 0, 0
	var version uint64
	send := func(path string, r writeRequest) {
		marks++
		version++
		r.path, r.name, r.version, r.at = path, path, version, now
		r.status = &v1alpha1.TaskStatus{}
		w.apply(r, now)
	}
	neverWritten := func(path string) bool {
		p := w.files[path]
		return p == nil || p.lastWrite.IsZero()
	}
	for step := range 5000 {
		path := paths[rng.IntN(len(paths))]
		if i := rng.IntN(len(paths)); i >= 30 && neverWritten(paths[i]) && rng.IntN(4) == 0 {
			// Requeued before its first write (an edit of a manifest
			// still waiting): due later than its queued item says.
			send(paths[i], writeRequest{queuedUntil: now.Add(queuedDelay)})
		}
		switch action := rng.IntN(6); {
		case path == paths[len(paths)-1] || path == paths[len(paths)-2]:
			// Two tasks only ever wait, requeued now and then.
			now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
		case action == 0:
			send(path, writeRequest{urgent: true})
		case action == 1:
			send(path, writeRequest{})
		case action == 2:
			send(path, writeRequest{urgent: true, commit: true})
		case action == 3:
			if neverWritten(path) {
				send(path, writeRequest{queuedUntil: now.Add(queuedDelay)})
			}
		default:
			now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
		due := map[string]bool{}
		var earliest time.Time
		for path, p := range w.files {
			if !p.dirty() {
				continue
			}
			if at := w.dueAt(p, now); !now.Before(at) {
				due[path] = true
			} else if earliest.IsZero() || at.Before(earliest) {
				earliest = at
			}
		}
		before := map[string]int{}
		for path, n := range rec.writes {
			before[path] = n
		}
		wait := w.pass(now, false)
		for _, path := range paths {
			wrote := rec.writes[path] > before[path]
			if wrote != due[path] {
				t.Fatalf("step %d: %s written %v, due %v", step, path, wrote, due[path])
			}
			if wrote {
				writes++
			}
		}
		if !earliest.IsZero() && (wait <= 0 || now.Add(wait).After(earliest)) {
			t.Fatalf("step %d: the pass waits %v, the next write is due in %v", step, wait, earliest.Sub(now))
		}
	}
	if w.duePopped > 3*(marks+writes) {
		t.Errorf("the passes looked at %d queued items for %d requests and %d writes", w.duePopped, marks, writes)
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

// TestWriterBoundsEachPassAndRetriesFailures: 200 batch commits due at
// once are written flushMax at a time, each pass asking for the next one
// within a millisecond; a failed write is tried again at its backoff, not
// before, and lands once the disk takes it; the owner hears of each
// outcome.
func TestWriterBoundsEachPassAndRetriesFailures(t *testing.T) {
	rec := &diskFullSpool{tallySpool: tallySpool{writes: map[string]int{}}, fail: map[string]bool{}}
	w := testWriter(t, rec)
	var outcomes []writeOutcome
	w.report = func(o writeOutcome) { outcomes = append(outcomes, o) }
	now := time.Now()
	var paths []string
	for i := range 200 {
		path := fmt.Sprintf("/spool/t%03d.yaml", i)
		paths = append(paths, path)
		w.apply(writeRequest{path: path, name: path, version: uint64(i + 1), status: &v1alpha1.TaskStatus{}, urgent: true, commit: true, at: now}, now)
	}
	failing := paths[7]
	rec.fail[failing] = true
	// 64 tried a pass (the failing one among them in one pass): 64 or 63
	// written by each of the first three, the last 8 or 7.
	total := 0
	for pass := range 4 {
		before := len(rec.writes)
		wait := w.pass(now, false)
		got := len(rec.writes) - before
		total += got
		if lo, hi := 63, 64; (pass < 3 && (got < lo || got > hi)) || (pass == 3 && (got < 7 || got > 8)) {
			t.Fatalf("pass %d wrote %d statuses, want at most flushMax (%d) of what is due", pass, got, flushMax)
		}
		if pass < 3 && wait != time.Millisecond {
			t.Errorf("pass %d: next in %v, want 1ms (more are due)", pass, wait)
		}
	}
	if total != 199 || len(outcomes) != 200 {
		t.Fatalf("%d statuses written, %d outcomes reported; want 199 and 200", total, len(outcomes))
	}
	dirty := func() (n int) {
		for _, p := range w.files {
			if p.dirty() {
				n++
			}
		}
		return n
	}
	if rec.writes[failing] != 0 || dirty() != 1 {
		t.Fatalf("after the passes: %d dirty, the failing one written %d times", dirty(), rec.writes[failing])
	}
	retry := w.files[failing].retryAt
	if retry.IsZero() {
		t.Fatal("no retry set for the failed write")
	}
	if n := len(rec.writes); w.pass(retry.Add(-time.Millisecond), false) <= 0 || len(rec.writes) != n {
		t.Error("the failed write was retried before its backoff")
	}
	rec.fail = map[string]bool{}
	w.pass(retry, false)
	if rec.writes[failing] != 1 || dirty() != 0 {
		t.Errorf("at its retry: written %d times, %d still dirty", rec.writes[failing], dirty())
	}
	if last := outcomes[len(outcomes)-1]; last.path != failing || last.err != nil || last.version != 8 {
		t.Errorf("last outcome %+v, want version 8 of %s written", last, failing)
	}
}
