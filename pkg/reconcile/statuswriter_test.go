package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// hangingSpool is a real spool whose status writes hang (a stuck file
// system, an API call up to its timeout) until released or 10 s pass,
// and whose events reach the controller through an unbuffered channel
// that records how long each one waited to be taken.
type hangingSpool struct {
	Spool
	events  chan spool.Event
	release chan struct{}
	// hung counts the writes in progress; began is set once one started.
	hung  atomic.Int32
	began chan struct{}
	once  sync.Once

	mu struct {
		sync.Mutex
		delays []time.Duration
		// whileHung counts the events taken while a write hung.
		whileHung int
	}
}

func newHangingSpool(sp Spool) *hangingSpool {
	s := &hangingSpool{Spool: sp, events: make(chan spool.Event), release: make(chan struct{}), began: make(chan struct{})}
	go func() {
		defer close(s.events)
		for ev := range sp.Events() {
			start := time.Now()
			s.events <- ev
			took := time.Since(start)
			s.mu.Lock()
			s.mu.delays = append(s.mu.delays, took)
			if s.hung.Load() > 0 {
				s.mu.whileHung++
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *hangingSpool) Events() <-chan spool.Event { return s.events }

func (s *hangingSpool) WriteStatus(path string, st *v1alpha1.TaskStatus) error {
	s.hung.Add(1)
	s.once.Do(func() { close(s.began) })
	select {
	case <-s.release:
	case <-time.After(10 * time.Second):
	}
	s.hung.Add(-1)
	return s.Spool.WriteStatus(path, st)
}

// TestOwnerTakesEventsWhileStatusWritesHang: status writes run on the
// writer's goroutine, so a write that hangs for 10 s holds up no spool
// event: every manifest dropped while the first write hangs is taken and
// run (its batch leaves a file behind) before that write returns, each
// event taken within milliseconds of its arrival.
func TestOwnerTakesEventsWhileStatusWritesHang(t *testing.T) {
	h := newHarness(t, Config{QueuedWriteDelay: time.Millisecond})
	var hs *hangingSpool
	h.wrap = func(sp Spool) Spool { hs = newHangingSpool(sp); return hs }
	out := filepath.Join(t.TempDir(), "ran")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.write("first.yaml", manifest("first", "true", ""))
	select {
	case <-hs.began:
	case <-time.After(20 * time.Second):
		t.Fatal("no status write started")
	}
	const n = 20
	for i := range n {
		name := fmt.Sprintf("t%02d", i)
		h.write(name+".yaml", manifest(name, "touch "+filepath.Join(out, name), ""))
	}
	h.eventually("every task run while the first write hangs", func() bool {
		ents, _ := os.ReadDir(out)
		return len(ents) == n
	})
	if hs.hung.Load() == 0 {
		t.Fatal("the hung write returned before the tasks ran: the test proves nothing")
	}
	hs.mu.Lock()
	delays, whileHung := slices.Clone(hs.mu.delays), hs.mu.whileHung
	hs.mu.Unlock()
	close(hs.release)
	if whileHung < n {
		t.Errorf("%d events taken while a write hung, want at least %d", whileHung, n)
	}
	slices.Sort(delays)
	worst := delays[len(delays)-1]
	t.Logf("%d events; waits to be taken: median %v, worst %v", len(delays), delays[len(delays)/2], worst)
	// The old owner goroutine made each event wait for the write in
	// progress (10 s); the bound here is loose for a loaded machine.
	if worst > time.Second {
		t.Errorf("an event waited %v to be taken", worst)
	}
	h.stop()
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the controller did not stop")
	}
	h.done <- Outcome{}
	if st := h.status("t07.yaml"); st.Phase != v1alpha1.PhaseDone {
		t.Errorf("t07 after shutdown: %s, want Done written", st.Phase)
	}
}

// TestWriterCloseWritesEverythingOnce: closing the writer writes every
// dirty status once, a failed one and one not due yet included, and
// reports each outcome.
func TestWriterCloseWritesEverythingOnce(t *testing.T) {
	rec := &diskFullSpool{tallySpool: tallySpool{writes: map[string]int{}}, fail: map[string]bool{"/s/b.yaml": true}}
	w := testWriter(t, rec)
	var mu sync.Mutex
	outcomes := map[string]error{}
	w.report = func(o writeOutcome) { mu.Lock(); outcomes[o.path] = o.err; mu.Unlock() }
	go w.run()
	far := time.Now().Add(time.Hour)
	w.submit(
		writeRequest{path: "/s/a.yaml", version: 1, status: &v1alpha1.TaskStatus{}, queuedUntil: far},
		writeRequest{path: "/s/b.yaml", version: 2, status: &v1alpha1.TaskStatus{}, urgent: true, at: time.Now()},
		writeRequest{path: "/s/c.yaml", version: 3, status: &v1alpha1.TaskStatus{}, queuedUntil: far},
		writeRequest{path: "/s/c.yaml"}, // forgotten: its manifest is gone
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closed := make(chan struct{})
	go func() { w.close(); close(closed) }()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("close did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if rec.writes["/s/a.yaml"] != 1 || rec.writes["/s/c.yaml"] != 0 {
		t.Errorf("writes %v: want a once, c never", rec.writes)
	}
	if outcomes["/s/b.yaml"] == nil || len(outcomes) != 2 {
		t.Errorf("outcomes %v: want a written, b failed", outcomes)
	}
}
