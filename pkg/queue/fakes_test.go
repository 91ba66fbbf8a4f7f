package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// guard bounds every wait of a test on a channel; reaching it is a failure
// (a deadlock or a missing signal), never a timing assertion.
const guard = 10 * time.Second

// notifier lets a test wait for a predicate over state guarded by mu.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

// lockedBroadcast wakes every waiter. REQUIRES: n.mu held.
func (n *notifier) lockedBroadcast() {
	if n.ch != nil {
		close(n.ch)
	}
	n.ch = make(chan struct{})
}

// waitUntil blocks until pred (called with n.mu held) is true.
func (n *notifier) waitUntil(t testing.TB, what string, pred func() bool) {
	t.Helper()
	deadline := time.NewTimer(guard)
	defer deadline.Stop()
	for {
		n.mu.Lock()
		if pred() {
			n.mu.Unlock()
			return
		}
		if n.ch == nil {
			n.ch = make(chan struct{})
		}
		ch := n.ch
		n.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// fakeRes is the fake admitter's reservation.
type fakeRes struct {
	id       uint64
	contract governor.Contract
}

func (r fakeRes) Contract() governor.Contract { return r.contract }

// idOf is the id of a reservation the fake admitter granted (0 otherwise).
func idOf(r Reservation) uint64 {
	fr, _ := r.(fakeRes)
	return fr.id
}

// fakeAdm is an instrumented Admitter: a memory budget counter that checks
// the queue's invariants (never over budget, release exactly once).
type fakeAdm struct {
	notifier
	budget int64
	used   int64
	nextID uint64
	active map[uint64]int64
	done   map[uint64]bool
	// waitFor and rejectFor force a verdict for an estimate's Class.
	waitFor, rejectFor map[string]bool
	changed            chan struct{}

	reserveCalls   []string // Class of every Reserve
	grants         int
	releases       int
	badReleases    int
	refreshes      int
	maxActive      int
	overBudgetSeen bool
}

var _ Admitter = (*fakeAdm)(nil)

func newFakeAdm(budget int64) *fakeAdm {
	return &fakeAdm{
		budget:    budget,
		active:    map[uint64]int64{},
		done:      map[uint64]bool{},
		waitFor:   map[string]bool{},
		rejectFor: map[string]bool{},
		changed:   make(chan struct{}),
	}
}

func (a *fakeAdm) Refresh() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refreshes++
	a.lockedBroadcast()
}

func need(e governor.Estimate, n int64) int64 { return e.FixedMemory + e.PerItemMemory*n }

func (a *fakeAdm) Reserve(e governor.Estimate) (governor.Decision, Reservation, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.lockedBroadcast()
	a.reserveCalls = append(a.reserveCalls, e.Class)
	d := governor.Decision{Batch: e.BatchMin, Threads: e.Threads, Budget: governor.BudgetMemory,
		Need: need(e, e.BatchMin), Free: a.budget - a.used, Reservations: len(a.active)}
	switch {
	case a.rejectFor[e.Class] || need(e, e.BatchMin) > a.budget || e.BatchMin < 1 || e.BatchMax < e.BatchMin:
		d.Verdict, d.Reason = governor.Reject, governor.ReasonExceedsCapacity
		return d, nil, false
	case a.waitFor[e.Class] || need(e, e.BatchMin) > a.budget-a.used:
		d.Verdict, d.Reason = governor.Wait, governor.ReasonInsufficientMemory
		return d, nil, false
	}
	n := e.BatchMax
	for need(e, n) > a.budget-a.used {
		n--
	}
	d.Verdict, d.Reason, d.Batch, d.Budget = governor.Admit, governor.ReasonFits, n, governor.BudgetNone
	if n < e.BatchMax {
		d.Verdict, d.Reason = governor.ReduceBatch, governor.ReasonBatchReduced
	}
	a.nextID++
	id := a.nextID
	c := governor.Contract{Batch: n, BatchRequested: e.BatchMax, Threads: e.Threads,
		MemoryBytes: need(e, n), Generation: id} // Generation carries the id, for lockedActive
	a.active[id] = c.MemoryBytes
	a.used += c.MemoryBytes
	a.grants++
	a.maxActive = max(a.maxActive, len(a.active))
	if a.used > a.budget {
		a.overBudgetSeen = true
	}
	return d, fakeRes{id, c}, true
}

func (a *fakeAdm) Release(r Reservation) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.lockedBroadcast()
	id := idOf(r)
	m, ok := a.active[id]
	if !ok {
		a.badReleases++
		return fmt.Errorf("release %d: not active (released before: %v)", id, a.done[id])
	}
	delete(a.active, id)
	a.done[id] = true
	a.used -= m
	a.releases++
	return nil
}

func (a *fakeAdm) Changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.changed
}

// bump is a governor generation change.
func (a *fakeAdm) bump() {
	a.mu.Lock()
	defer a.mu.Unlock()
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *fakeAdm) setWait(class string, wait bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waitFor[class] = wait
}

// lockedActive says whether the contract's reservation is active.
func (a *fakeAdm) lockedActive(c governor.Contract) bool {
	_, ok := a.active[c.Generation]
	return ok
}

func (a *fakeAdm) activeCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.active)
}

func (a *fakeAdm) asked(class string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.reserveCalls {
		if c == class {
			n++
		}
	}
	return n
}

// fakeRunner starts fakeBatches that the test finishes. It checks that each
// batch starts, pauses and resumes under an active reservation.
type fakeRunner struct {
	notifier
	adm        *fakeAdm
	batches    []*fakeBatch
	startErr   func(Batch) error
	violations []string
	// onStart, when set, is handed every started batch (with r.mu held).
	onStart func(*fakeBatch)
}

var _ BatchRunner = (*fakeRunner)(nil)

func (r *fakeRunner) check(what string, b Batch) {
	if r.adm == nil { // a real governor: the test checks through onStart
		return
	}
	r.adm.mu.Lock()
	ok := r.adm.lockedActive(b.Contract)
	r.adm.mu.Unlock()
	if !ok {
		r.violations = append(r.violations, fmt.Sprintf("%s %s batch %d without an active reservation", what, b.Task, b.Index))
	}
	if b.Size > b.Contract.Batch || b.Size < 1 {
		r.violations = append(r.violations, fmt.Sprintf("%s %s batch %d: size %d outside contract %d", what, b.Task, b.Index, b.Size, b.Contract.Batch))
	}
}

func (r *fakeRunner) Start(_ context.Context, b Batch) (RunningBatch, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer r.lockedBroadcast()
	r.check("start", b)
	if r.startErr != nil {
		if err := r.startErr(b); err != nil {
			return nil, err
		}
	}
	fb := &fakeBatch{r: r, b: b, finished: make(chan struct{})}
	r.batches = append(r.batches, fb)
	if r.onStart != nil {
		r.onStart(fb)
	}
	return fb, nil
}

// nth waits for the n-th batch (from 0) of a task to start and returns it.
func (r *fakeRunner) nth(t testing.TB, task string, n int) *fakeBatch {
	t.Helper()
	var out *fakeBatch
	r.waitUntil(t, fmt.Sprintf("batch #%d of %s", n, task), func() bool {
		i := 0
		for _, fb := range r.batches {
			if fb.b.Task == task {
				if i == n {
					out = fb
					return true
				}
				i++
			}
		}
		return false
	})
	return out
}

func (r *fakeRunner) started(task string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, fb := range r.batches {
		if fb.b.Task == task {
			n++
		}
	}
	return n
}

func (r *fakeRunner) violationList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.violations...)
}

// fakeBatch is a batch the test ends with finish.
type fakeBatch struct {
	r        *fakeRunner
	b        Batch
	once     sync.Once
	finished chan struct{}
	result   BatchResult
	// guarded by r.mu
	pauses, resumes, cancels int
}

func (fb *fakeBatch) finish(res BatchResult) {
	fb.once.Do(func() {
		fb.result = res
		close(fb.finished)
	})
}

func (fb *fakeBatch) ok() { fb.finish(BatchResult{ExitCode: 0}) }

func (fb *fakeBatch) Pause() error {
	fb.r.mu.Lock()
	defer fb.r.mu.Unlock()
	defer fb.r.lockedBroadcast()
	fb.r.check("pause", fb.b)
	fb.pauses++
	return nil
}

func (fb *fakeBatch) Resume() error {
	fb.r.mu.Lock()
	defer fb.r.mu.Unlock()
	defer fb.r.lockedBroadcast()
	fb.r.check("resume", fb.b)
	fb.resumes++
	return nil
}

func (fb *fakeBatch) Cancel() {
	fb.r.mu.Lock()
	fb.cancels++
	fb.r.lockedBroadcast()
	fb.r.mu.Unlock()
	fb.finish(BatchResult{ExitCode: -1, Reason: "Cancelled"})
}

func (fb *fakeBatch) Wait() BatchResult {
	<-fb.finished
	return fb.result
}

func (fb *fakeBatch) counts() (pauses, resumes, cancels int) {
	fb.r.mu.Lock()
	defer fb.r.mu.Unlock()
	return fb.pauses, fb.resumes, fb.cancels
}

// recorder is an Observer that keeps every event.
type recorder struct {
	notifier
	events []Event
}

func (o *recorder) Observe(e Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
	o.lockedBroadcast()
}

// waitEvent waits for an event matching pred and returns it.
func (o *recorder) waitEvent(t testing.TB, what string, pred func(Event) bool) Event {
	t.Helper()
	var out Event
	o.waitUntil(t, what, func() bool {
		for _, e := range o.events {
			if pred(e) {
				out = e
				return true
			}
		}
		return false
	})
	return out
}

func (o *recorder) waitPhase(t testing.TB, task string, p v1alpha1.Phase) Event {
	t.Helper()
	return o.waitEvent(t, task+" "+string(p), func(e Event) bool {
		return e.Task == task && e.Type == EventPhase && e.Phase == p
	})
}

func (o *recorder) of(task string) []Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Event
	for _, e := range o.events {
		if e.Task == task {
			out = append(out, e)
		}
	}
	return out
}

// phases lists a task's EventPhase phases in order.
func (o *recorder) phases(task string) []v1alpha1.Phase {
	var out []v1alpha1.Phase
	for _, e := range o.of(task) {
		if e.Type == EventPhase {
			out = append(out, e.Phase)
		}
	}
	return out
}

// reasonErr is a start error that names its reason, as the runner's do.
type reasonErr struct{ reason, msg string }

func (e *reasonErr) Error() string  { return e.msg }
func (e *reasonErr) Reason() string { return e.reason }

var errNotFound = &reasonErr{reason: v1alpha1.ReasonCommandNotFound, msg: `exec: "nope": executable file not found in $PATH`}

func (o *recorder) all() []Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Event(nil), o.events...)
}
