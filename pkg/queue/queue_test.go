package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

type harness struct {
	q       *Queue
	adm     *fakeAdm
	run     *fakeRunner
	obs     *recorder
	clk     *clocktesting.FakeClock
	runDone chan error
}

// newHarness builds a queue over the fakes, upserts tasks, then starts Run.
// Cleanup closes it and checks the admitter's invariants.
func newHarness(t *testing.T, cfg Config, budget int64, tasks ...Task) *harness {
	t.Helper()
	return newHarnessWith(t, cfg, budget, nil, nil, tasks...)
}

// newHarnessWith is newHarness with queue options, and the fake admitter
// wrapped by wrap when not nil.
func newHarnessWith(t *testing.T, cfg Config, budget int64, wrap func(*fakeAdm) Admitter, opts []Option, tasks ...Task) *harness {
	t.Helper()
	h := &harness{adm: newFakeAdm(budget), obs: &recorder{}, clk: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)), runDone: make(chan error, 1)}
	h.run = &fakeRunner{adm: h.adm}
	var adm Admitter = h.adm
	if wrap != nil {
		adm = wrap(h.adm)
	}
	h.q = New(cfg, adm, h.run, h.obs, append([]Option{WithClock(h.clk)}, opts...)...)
	for _, tk := range tasks {
		if err := h.q.Upsert(tk); err != nil {
			t.Fatalf("upsert %s: %v", tk.Name, err)
		}
	}
	go func() { h.runDone <- h.q.Run(context.Background()) }()
	t.Cleanup(func() {
		h.close(t)
		h.checkInvariants(t)
	})
	return h
}

func (h *harness) close(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	err := h.q.Close(ctx)
	if err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-h.runDone:
		if err != nil {
			t.Errorf("run returned %v, want nil after Close", err)
		}
		h.runDone <- nil
	case <-time.After(guard):
		t.Fatal("run did not return after Close")
	}
}

func (h *harness) checkInvariants(t *testing.T) {
	t.Helper()
	if n := h.adm.activeCount(); n != 0 {
		t.Errorf("%d reservations still active after Close", n)
	}
	h.adm.mu.Lock()
	defer h.adm.mu.Unlock()
	if h.adm.badReleases != 0 {
		t.Errorf("%d releases of a reservation not active (double release)", h.adm.badReleases)
	}
	if h.adm.overBudgetSeen {
		t.Error("the fake admitter went over budget")
	}
	if h.adm.grants != h.adm.releases {
		t.Errorf("%d grants, %d releases", h.adm.grants, h.adm.releases)
	}
	for _, v := range h.run.violationList() {
		t.Error(v)
	}
}

// mkTask is a task of items items, batches of at most batchMax, each item
// costing one unit of the fake budget.
func mkTask(name string, seq, items, batchMax int64) Task {
	return Task{
		Name: name, Seq: seq, ItemsTotal: items,
		Estimate: governor.Estimate{Class: name, PerItemMemory: 1, BatchMin: 1, BatchMax: batchMax, Threads: 2, MinThreads: 1},
	}
}

func TestBatchesRunUnderReservationReleasedOncePerCycle(t *testing.T) {
	h := newHarness(t, Config{}, 100, mkTask("a", 1, 10, 4))
	var sizes []int64
	for i := range 3 {
		fb := h.run.nth(t, "a", i)
		if fb.b.Index != int64(i) || fb.b.Attempt != 1 || fb.b.Total != 10 {
			t.Errorf("batch %d: got %+v", i, fb.b)
		}
		sizes = append(sizes, fb.b.Size)
		fb.ok()
	}
	done := h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
	if done.ItemsDone != 10 || done.BatchesDone != 3 {
		t.Errorf("done event progress %d items %d batches, want 10 and 3", done.ItemsDone, done.BatchesDone)
	}
	if !slices.Equal(sizes, []int64{4, 4, 2}) {
		t.Errorf("batch sizes %v, want [4 4 2]", sizes)
	}
	h.adm.mu.Lock()
	grants, releases := h.adm.grants, h.adm.releases
	h.adm.mu.Unlock()
	if grants != 3 || releases != 3 {
		t.Errorf("grants %d releases %d, want 3 each (one cycle per batch)", grants, releases)
	}
	want := []v1alpha1.Phase{v1alpha1.PhaseReserved, v1alpha1.PhaseRunning, v1alpha1.PhaseDone}
	if got := h.obs.phases("a"); !slices.Equal(got, want) {
		t.Errorf("phases %v, want %v", got, want)
	}
	var types []EventType
	for _, e := range h.obs.of("a") {
		types = append(types, e.Type)
		if (e.Phase == v1alpha1.PhaseRunning || e.Phase == v1alpha1.PhaseReserved) && e.Contract == nil {
			t.Errorf("event %v in phase %s carries no contract", e.Type, e.Phase)
		}
	}
	wantTypes := []EventType{EventPhase, EventPhase, EventBatchStarted, EventBatchEnded, EventBatchStarted, EventBatchEnded, EventBatchStarted, EventBatchEnded, EventPhase}
	if !slices.Equal(types, wantTypes) {
		t.Errorf("event types %v, want %v", types, wantTypes)
	}
	if hist := h.q.History(); len(hist) != 1 || hist[0].Task != "a" || hist[0].Phase != v1alpha1.PhaseDone {
		t.Errorf("history %+v", hist)
	}
}

func TestFIFOAmongAdmissible(t *testing.T) {
	// The budget fits one task at a time; they were upserted out of order.
	h := newHarness(t, Config{}, 5, mkTask("c", 3, 5, 5), mkTask("a", 1, 5, 5), mkTask("b", 2, 5, 5), mkTask("b2", 2, 5, 5))
	for _, name := range []string{"a", "b", "b2", "c"} {
		h.run.nth(t, name, 0).ok()
		h.obs.waitPhase(t, name, v1alpha1.PhaseDone)
	}
	var order []string
	for _, e := range h.obs.all() {
		if e.Type == EventPhase && e.Phase == v1alpha1.PhaseReserved {
			order = append(order, e.Task)
		}
	}
	if !slices.Equal(order, []string{"a", "b", "b2", "c"}) {
		t.Errorf("admission order %v, want FIFO by (seq, name)", order)
	}
}

func TestWaitDoesNotBlockThoseBehind(t *testing.T) {
	a, b := mkTask("a", 1, 3, 3), mkTask("b", 2, 3, 3)
	h := newHarness(t, Config{}, 100)
	h.adm.setWait("a", true)
	h.q.Upsert(a)
	h.q.Upsert(b)
	h.run.nth(t, "b", 0)
	w := h.obs.waitEvent(t, "a waiting", func(e Event) bool { return e.Task == "a" && e.Type == EventWaiting })
	if w.Reason != string(governor.ReasonInsufficientMemory) || w.Phase != v1alpha1.PhasePending || !strings.Contains(w.Message, "free") {
		t.Errorf("waiting event %+v", w)
	}
	if h.run.started("a") != 0 {
		t.Error("a started while told Wait")
	}
}

func TestReleaseWakesWaiterWithoutTimer(t *testing.T) {
	// The fake clock is never stepped: the 500 ms rescan timer never fires,
	// so b can only be admitted through the release's signal.
	h := newHarness(t, Config{}, 5, mkTask("a", 1, 5, 5), mkTask("b", 2, 5, 5))
	fa := h.run.nth(t, "a", 0)
	h.obs.waitEvent(t, "b waiting", func(e Event) bool { return e.Task == "b" && e.Type == EventWaiting })
	fa.ok()
	h.run.nth(t, "b", 0).ok()
	h.obs.waitPhase(t, "b", v1alpha1.PhaseDone)
}

func TestGovernorChangeWakesWaiter(t *testing.T) {
	h := newHarness(t, Config{}, 5)
	h.adm.setWait("a", true)
	h.q.Upsert(mkTask("a", 1, 5, 5))
	h.obs.waitEvent(t, "a waiting", func(e Event) bool { return e.Task == "a" && e.Type == EventWaiting })
	h.adm.setWait("a", false)
	h.adm.bump() // a generation change; the clock is not stepped
	h.run.nth(t, "a", 0).ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
}

func TestRescanAfterTimerWhenNoSignal(t *testing.T) {
	h := newHarness(t, Config{}, 5)
	h.adm.setWait("a", true)
	h.q.Upsert(mkTask("a", 1, 5, 5))
	h.obs.waitEvent(t, "a waiting", func(e Event) bool { return e.Task == "a" && e.Type == EventWaiting })
	h.adm.setWait("a", false) // no signal: only the rescan timer can notice
	if !h.clk.HasWaiters() {
		t.Fatal("no rescan timer armed while a Wait is pending")
	}
	h.clk.Step(DefaultRescanWait)
	h.run.nth(t, "a", 0).ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
}

func TestWaitingEventsAreNotRepeated(t *testing.T) {
	h := newHarness(t, Config{}, 5)
	h.adm.setWait("a", true)
	h.q.Upsert(mkTask("a", 1, 5, 5))
	h.obs.waitEvent(t, "a waiting", func(e Event) bool { return e.Task == "a" && e.Type == EventWaiting })
	for i := range 5 {
		h.q.Upsert(mkTask("x", int64(10+i), 0, 1)) // a signal, and a rescan
		h.obs.waitPhase(t, "x", v1alpha1.PhaseDone)
		h.adm.waitUntil(t, "rescan", func() bool { return countOf(h.adm.reserveCalls, "a") >= i+2 })
	}
	n := 0
	for _, e := range h.obs.of("a") {
		if e.Type == EventWaiting {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d EventWaiting for an unchanged decision, want 1", n)
	}
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func TestDependencies(t *testing.T) {
	b := mkTask("b", 1, 2, 2)
	b.DependsOn = []string{"a"}
	c := mkTask("c", 2, 2, 2)
	c.DependsOn = []string{"ghost"}
	d := mkTask("d", 3, 2, 2)
	d.DependsOn = []string{"e"}
	e := mkTask("e", 4, 2, 2)
	e.DependsOn = []string{"d"}
	self := mkTask("s", 5, 2, 2)
	self.DependsOn = []string{"s"}
	behind := mkTask("z", 9, 2, 2)
	behind.DependsOn = []string{"d"}
	a := mkTask("a", 6, 2, 2)
	h := newHarness(t, Config{}, 100, b, c, d, e, self, behind, a)

	w := h.obs.waitEvent(t, "b waits for a", func(ev Event) bool { return ev.Task == "b" && ev.Type == EventWaiting })
	if w.Reason != v1alpha1.ReasonWaitingForDependencies || !strings.Contains(w.Message, "a") {
		t.Errorf("b: %+v", w)
	}
	w = h.obs.waitEvent(t, "c missing", func(ev Event) bool { return ev.Task == "c" && ev.Type == EventWaiting })
	if w.Reason != v1alpha1.ReasonDependencyMissing || !strings.Contains(w.Message, "ghost") {
		t.Errorf("c: %+v", w)
	}
	for _, name := range []string{"d", "e"} {
		r := h.obs.waitPhase(t, name, v1alpha1.PhaseRejected)
		if r.Reason != v1alpha1.ReasonDependencyCycle || r.Message != "dependency cycle: d -> e -> d" {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if r := h.obs.waitPhase(t, "s", v1alpha1.PhaseRejected); r.Message != "dependency cycle: s -> s" {
		t.Errorf("self cycle: %q", r.Message)
	}
	w = h.obs.waitEvent(t, "z held", func(ev Event) bool {
		return ev.Task == "z" && ev.Type == EventWaiting && ev.Reason == v1alpha1.ReasonDependencyFailed
	})
	if !strings.Contains(w.Message, "d (Rejected)") {
		t.Errorf("z: %q", w.Message)
	}
	// b is never asked to the governor before a is Done.
	h.run.nth(t, "a", 0).ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
	fb := h.run.nth(t, "b", 0)
	if h.adm.asked("b") != 1 {
		t.Errorf("b asked %d times, want once (after a was Done)", h.adm.asked("b"))
	}
	fb.ok()
	h.obs.waitPhase(t, "b", v1alpha1.PhaseDone)
	for _, name := range []string{"c", "z", "d", "e"} {
		if h.adm.asked(name) != 0 {
			t.Errorf("%s was asked to the governor", name)
		}
	}
	if st := stateOf(h.q, "z"); st.Phase != v1alpha1.PhasePending {
		t.Errorf("z phase %s, want Pending (held)", st.Phase)
	}
}

func stateOf(q *Queue, name string) TaskState {
	for _, s := range q.Snapshot() {
		if s.Name == name {
			return s
		}
	}
	return TaskState{}
}

func TestFailedDependencyHoldsThenContinues(t *testing.T) {
	f := mkTask("f", 1, 2, 2)
	g := mkTask("g", 2, 2, 2)
	g.DependsOn = []string{"f"}
	h := newHarness(t, Config{}, 100)
	first := true
	h.run.startErr = func(b Batch) error { // called with h.run.mu held
		if b.Task == "f" && first {
			first = false
			return errNotFound
		}
		return nil
	}
	h.q.Upsert(f)
	h.q.Upsert(g)
	failed := h.obs.waitPhase(t, "f", v1alpha1.PhaseFailed)
	if failed.Reason != v1alpha1.ReasonCommandNotFound || !strings.Contains(failed.Message, "executable file not found") {
		t.Errorf("f failed with %q %q", failed.Reason, failed.Message)
	}
	held := h.obs.waitEvent(t, "g held", func(e Event) bool {
		return e.Task == "g" && e.Type == EventWaiting && e.Reason == v1alpha1.ReasonDependencyFailed
	})
	if !strings.Contains(held.Message, "f (Failed)") {
		t.Errorf("g held with %q", held.Message)
	}
	// Same generation: the ended task is not restarted.
	h.q.Upsert(f)
	// A new generation of f runs again, then g continues.
	f.Generation = 2
	if err := h.q.Upsert(f); err != nil {
		t.Fatal(err)
	}
	h.run.nth(t, "f", 0).ok()
	h.run.nth(t, "g", 0).ok()
	h.obs.waitPhase(t, "g", v1alpha1.PhaseDone)
	if n := h.run.started("f"); n != 1 {
		t.Errorf("f started %d batches, want 1 (the same generation must not restart it)", n)
	}
}

func TestRetriesWithBackoffOnTheFakeClock(t *testing.T) {
	a := mkTask("a", 1, 4, 4)
	a.Retries = 2
	h := newHarness(t, Config{RetryBackoff: time.Second}, 100, a)
	fail := BatchResult{ExitCode: 3}
	h.run.nth(t, "a", 0).finish(fail)
	h.obs.waitEvent(t, "first failure", func(e Event) bool { return e.Task == "a" && e.Type == EventBatchEnded })
	h.clk.Step(999 * time.Millisecond)
	if !h.clk.HasWaiters() {
		t.Fatal("backoff fired before 1s")
	}
	h.clk.Step(time.Millisecond)
	fb := h.run.nth(t, "a", 1)
	if fb.b.Attempt != 2 || fb.b.Index != 0 || fb.b.Start != 0 || fb.b.Size != 4 {
		t.Errorf("retry batch %+v", fb.b)
	}
	fb.finish(fail)
	h.obs.waitEvent(t, "second failure", func(e Event) bool {
		return e.Task == "a" && e.Type == EventBatchEnded && e.Batch.Attempt == 2
	})
	h.clk.Step(1999 * time.Millisecond) // the backoff doubled
	if !h.clk.HasWaiters() {
		t.Fatal("second backoff fired before 2s")
	}
	h.clk.Step(time.Millisecond)
	h.run.nth(t, "a", 2).finish(fail)
	failed := h.obs.waitPhase(t, "a", v1alpha1.PhaseFailed)
	if failed.Reason != v1alpha1.ReasonExitCode || !strings.Contains(failed.Message, "after 3 attempts") {
		t.Errorf("failed event %q %q", failed.Reason, failed.Message)
	}
	h.adm.mu.Lock()
	defer h.adm.mu.Unlock()
	if h.adm.grants != 1 || h.adm.releases != 1 || len(h.run.batches) != 3 {
		t.Errorf("grants %d releases %d batches run %d; retries keep one reservation", h.adm.grants, h.adm.releases, len(h.run.batches))
	}
}

func TestMemoryExceededHalvesTheBatch(t *testing.T) {
	h := newHarness(t, Config{}, 100, mkTask("a", 1, 8, 8))
	over := BatchResult{ExitCode: -1, Reason: v1alpha1.ReasonMemoryExceeded, Message: "peak 9MiB > 8MiB"}
	h.run.nth(t, "a", 0).finish(over)
	fb := h.run.nth(t, "a", 1)
	if fb.b.Size != 4 || fb.b.Start != 0 || fb.b.Attempt != 2 || fb.b.Contract.BatchRequested != 4 {
		t.Errorf("after MemoryExceeded: %+v", fb.b)
	}
	fb.finish(over)
	fb = h.run.nth(t, "a", 2)
	if fb.b.Size != 2 {
		t.Errorf("second halving: size %d, want 2", fb.b.Size)
	}
	fb.ok()
	for i := 3; i <= 5; i++ {
		fb := h.run.nth(t, "a", i)
		if fb.b.Size != 2 {
			t.Errorf("batch %d size %d, the cap must stay at 2", i, fb.b.Size)
		}
		fb.ok()
	}
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
}

func TestMemoryExceededAtBatchMinFails(t *testing.T) {
	a := mkTask("a", 1, 8, 4)
	a.Estimate.BatchMin = 4
	a.Retries = 5
	h := newHarness(t, Config{}, 100, a)
	h.run.nth(t, "a", 0).finish(BatchResult{ExitCode: -1, Reason: v1alpha1.ReasonMemoryExceeded})
	f := h.obs.waitPhase(t, "a", v1alpha1.PhaseFailed)
	if f.Reason != v1alpha1.ReasonMemoryExceeded || !strings.Contains(f.Message, "batch.min") {
		t.Errorf("failed with %q %q", f.Reason, f.Message)
	}
}

func TestPauseKeepsTheReservation(t *testing.T) {
	h := newHarness(t, Config{}, 100, mkTask("a", 1, 6, 3))
	fb := h.run.nth(t, "a", 0)
	h.q.SetPaused("a", true)
	h.obs.waitPhase(t, "a", v1alpha1.PhasePaused)
	if p, _, _ := fb.counts(); p != 1 {
		t.Errorf("pauses %d, want 1", p)
	}
	if h.adm.activeCount() != 1 {
		t.Error("the reservation was not kept while paused")
	}
	h.q.SetPaused("a", false)
	h.obs.waitEvent(t, "running again", func(e Event) bool {
		return e.Task == "a" && e.Type == EventPhase && e.Phase == v1alpha1.PhaseRunning && e.Message == "batch resumed"
	})
	if _, r, _ := fb.counts(); r != 1 {
		t.Errorf("resumes %d, want 1", r)
	}
	// Paused between batches: the next batch waits, the reservation is kept.
	h.q.SetPaused("a", true)
	fb.ok()
	h.obs.waitEvent(t, "paused between batches", func(e Event) bool {
		return e.Task == "a" && e.Type == EventPhase && e.Phase == v1alpha1.PhasePaused && strings.Contains(e.Message, "between")
	})
	h.adm.mu.Lock()
	grants, active := h.adm.grants, len(h.adm.active)
	h.adm.mu.Unlock()
	if grants != 1 || active != 1 || h.run.started("a") != 1 {
		t.Errorf("grants %d active %d started %d while paused between batches, want 1 1 1", grants, active, h.run.started("a"))
	}
	h.q.SetPaused("a", false)
	h.run.nth(t, "a", 1).ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
}

func TestPausedPendingTaskIsNotDispatched(t *testing.T) {
	a := mkTask("a", 1, 2, 2)
	a.Paused = true
	h := newHarness(t, Config{}, 100, a, mkTask("b", 2, 2, 2))
	h.run.nth(t, "b", 0)
	w := h.obs.waitEvent(t, "a paused", func(e Event) bool { return e.Task == "a" && e.Type == EventWaiting })
	if w.Reason != v1alpha1.ReasonPaused || h.adm.asked("a") != 0 {
		t.Errorf("paused pending task: %+v, asked %d", w, h.adm.asked("a"))
	}
	h.q.SetPaused("a", false)
	h.run.nth(t, "a", 0)
}

func TestRemoveCancelsAndReleasesOnce(t *testing.T) {
	h := newHarness(t, Config{}, 100, mkTask("a", 1, 6, 3))
	fb := h.run.nth(t, "a", 0)
	if err := h.q.Remove("a"); err != nil {
		t.Fatal(err)
	}
	h.adm.waitUntil(t, "release after remove", func() bool { return len(h.adm.active) == 0 })
	if _, _, c := fb.counts(); c != 1 {
		t.Errorf("cancels %d, want 1", c)
	}
	n := len(h.obs.of("a"))
	if err := h.q.Remove("a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second remove: %v", err)
	}
	// A new task of the same name starts afresh.
	h.q.Upsert(mkTask("a", 1, 3, 3))
	h.run.nth(t, "a", 1).ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
	for _, e := range h.obs.of("a")[n:] {
		if e.Type == EventBatchEnded && e.Result.Reason == "Cancelled" {
			t.Error("the removed task emitted an event")
		}
	}
	h.adm.mu.Lock()
	defer h.adm.mu.Unlock()
	if h.adm.releases != 2 || h.adm.grants != 2 {
		t.Errorf("grants %d releases %d, want 2 and 2", h.adm.grants, h.adm.releases)
	}
}

func TestMaxParallel(t *testing.T) {
	h := newHarness(t, Config{MaxParallel: 2}, 1000,
		mkTask("a", 1, 1, 1), mkTask("b", 2, 1, 1), mkTask("c", 3, 1, 1), mkTask("d", 4, 1, 1))
	fa, fb := h.run.nth(t, "a", 0), h.run.nth(t, "b", 0)
	w := h.obs.waitEvent(t, "c waits for a slot", func(e Event) bool { return e.Task == "c" && e.Type == EventWaiting })
	if w.Reason != ReasonMaxParallel {
		t.Errorf("c waits with %q", w.Reason)
	}
	if h.run.started("c")+h.run.started("d") != 0 || h.adm.asked("c") != 0 {
		t.Error("more than MaxParallel tasks started")
	}
	fa.ok()
	h.run.nth(t, "c", 0).ok()
	fb.ok()
	h.run.nth(t, "d", 0).ok()
	h.obs.waitPhase(t, "d", v1alpha1.PhaseDone)
	h.adm.mu.Lock()
	defer h.adm.mu.Unlock()
	if h.adm.maxActive > 2 {
		t.Errorf("%d reservations at once with MaxParallel 2", h.adm.maxActive)
	}
}

func TestSequenceBreakLetsEarlierTaskIn(t *testing.T) {
	// b is first in the FIFO but told Wait, so a runs. At a's sequence break
	// b (now admissible) takes the budget; a waits Pending, holding nothing,
	// polling every BoundaryPoll, and resumes with its progress.
	h := newHarness(t, Config{}, 4)
	h.adm.setWait("b", true)
	h.q.Upsert(mkTask("b", 1, 4, 4))
	h.q.Upsert(mkTask("a", 2, 8, 4))
	fa := h.run.nth(t, "a", 0)
	h.adm.setWait("b", false)
	fa.ok()
	fbb := h.run.nth(t, "b", 0)
	p := h.obs.waitEvent(t, "a pending at boundary", func(e Event) bool {
		return e.Task == "a" && e.Type == EventPhase && e.Phase == v1alpha1.PhasePending
	})
	if p.Contract != nil || p.ItemsDone != 4 || p.Reason != string(governor.ReasonInsufficientMemory) {
		t.Errorf("boundary pending event %+v", p)
	}
	if st := stateOf(h.q, "a"); st.Contract != nil || st.Phase != v1alpha1.PhasePending {
		t.Errorf("a at the boundary: %+v", st)
	}
	fbb.ok()
	h.obs.waitPhase(t, "b", v1alpha1.PhaseDone)
	before := h.adm.asked("a")
	h.clk.Step(DefaultBoundaryPoll)
	fa2 := h.run.nth(t, "a", 1)
	if fa2.b.Start != 4 || fa2.b.Index != 1 {
		t.Errorf("second batch %+v, progress lost", fa2.b)
	}
	if h.adm.asked("a") != before+1 {
		t.Errorf("a asked %d times after the poll, want 1", h.adm.asked("a")-before)
	}
	fa2.ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
	want := []v1alpha1.Phase{v1alpha1.PhaseReserved, v1alpha1.PhaseRunning, v1alpha1.PhasePending,
		v1alpha1.PhaseReserved, v1alpha1.PhaseRunning, v1alpha1.PhaseDone}
	if got := h.obs.phases("a"); !slices.Equal(got, want) {
		t.Errorf("a phases %v, want %v", got, want)
	}
}

func TestStartErrorFailsAtOnce(t *testing.T) {
	h := newHarness(t, Config{}, 100)
	h.run.startErr = func(Batch) error { return errors.New("fork: resource temporarily unavailable") }
	a := mkTask("a", 1, 4, 4)
	a.Retries = 3
	h.q.Upsert(a)
	f := h.obs.waitPhase(t, "a", v1alpha1.PhaseFailed)
	if f.Reason != ReasonStartFailed || !strings.Contains(f.Message, "fork") {
		t.Errorf("failed with %q %q", f.Reason, f.Message)
	}
}

func TestRejectEndsTheTask(t *testing.T) {
	h := newHarness(t, Config{}, 3)
	huge := mkTask("huge", 0, 10, 10)
	huge.Estimate.BatchMin = 10
	h.q.Upsert(huge)
	r := h.obs.waitPhase(t, "huge", v1alpha1.PhaseRejected)
	if r.Reason != string(governor.ReasonExceedsCapacity) {
		t.Errorf("rejected with %q", r.Reason)
	}
	if !slices.ContainsFunc(h.q.History(), func(e Event) bool { return e.Task == "huge" }) {
		t.Error("rejection missing from history")
	}
}

func TestCloseCancelsReleasesAndIsIdempotent(t *testing.T) {
	h := newHarness(t, Config{}, 100, mkTask("a", 1, 6, 3), mkTask("b", 2, 6, 3))
	fa, fb := h.run.nth(t, "a", 0), h.run.nth(t, "b", 0)
	fa.ok()
	h.run.nth(t, "a", 1)
	h.close(t)
	if n := h.adm.activeCount(); n != 0 {
		t.Errorf("%d reservations left after Close", n)
	}
	if _, _, c := fb.counts(); c != 1 {
		t.Errorf("b cancels %d, want 1", c)
	}
	st := h.obs.waitPhase(t, "a", v1alpha1.PhasePending)
	if st.Reason != ReasonShutdown || st.ItemsDone != 3 || st.Contract != nil {
		t.Errorf("a after shutdown: %+v", st)
	}
	if err := h.q.Close(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("second close: %v, want ErrClosed", err)
	}
	if err := h.q.Upsert(mkTask("c", 3, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("upsert after close: %v", err)
	}
	if err := h.q.Run(context.Background()); err == nil {
		t.Error("run after close returned nil")
	}
}

func TestUpsertWhileRunningTakesOnlyPaused(t *testing.T) {
	a := mkTask("a", 1, 6, 3)
	h := newHarness(t, Config{}, 100, a)
	fb := h.run.nth(t, "a", 0)
	edited := a
	edited.Generation = 2
	edited.ItemsTotal = 99
	edited.Paused = true
	if err := h.q.Upsert(edited); !errors.Is(err, ErrSpecPending) {
		t.Errorf("upsert of a running task: %v, want ErrSpecPending", err)
	}
	h.obs.waitPhase(t, "a", v1alpha1.PhasePaused)
	if st := stateOf(h.q, "a"); st.ItemsTotal != 6 {
		t.Errorf("items total %d, the running spec must not change", st.ItemsTotal)
	}
	h.q.SetPaused("a", false)
	fb.ok()
	h.run.nth(t, "a", 1).ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
}

// A new generation with Restart replaces a running one at once: the
// batch in flight is cancelled, its reservation released, and the new
// generation continues from the committed progress (CarryProgress).
func TestReplaceWithRestartCancelsTheRunningGeneration(t *testing.T) {
	a := mkTask("a", 1, 6, 2)
	a.Generation = 1
	h := newHarness(t, Config{}, 100, a)
	h.run.nth(t, "a", 0).ok()
	running := h.run.nth(t, "a", 1)
	edited := a
	edited.Generation, edited.Restart, edited.CarryProgress = 2, true, true
	rep, err := h.q.Replace(edited)
	if err != nil || !rep.Existed || rep.Generation != 1 || rep.ItemsDone != 2 {
		t.Fatalf("restart: %+v, %v; want generation 1 replaced from 2 items", rep, err)
	}
	h.run.waitUntil(t, "the running batch cancelled", func() bool { return running.cancels == 1 })
	next := h.run.nth(t, "a", 2)
	if next.b.Generation != 2 || next.b.Start != 2 {
		t.Errorf("next batch %+v, want generation 2 from item 2", next.b)
	}
	next.ok()
	h.run.nth(t, "a", 3).ok()
	if st := h.obs.waitPhase(t, "a", v1alpha1.PhaseDone); st.Generation != 2 || st.ItemsDone != 6 || len(h.run.violationList()) > 0 {
		t.Errorf("a: %+v, violations %v", st, h.run.violationList())
	}
	if n := h.adm.activeCount(); n != 0 {
		t.Errorf("%d reservations left", n)
	}
}

func TestHistoryIsBounded(t *testing.T) {
	h := newHarness(t, Config{HistorySize: 3}, 100)
	for i, name := range []string{"t1", "t2", "t3", "t4", "t5"} {
		h.q.Upsert(mkTask(name, int64(i), 0, 1))
		h.obs.waitPhase(t, name, v1alpha1.PhaseDone)
	}
	var got []string
	for _, e := range h.q.History() {
		got = append(got, e.Task)
	}
	if !slices.Equal(got, []string{"t3", "t4", "t5"}) {
		t.Errorf("history %v, want the last three", got)
	}
}

func TestBackoffDoublesAndCaps(t *testing.T) {
	c := Config{RetryBackoff: time.Second, MaxRetryBackoff: 5 * time.Second}.withDefaults()
	var got []time.Duration
	for n := 1; n <= 5; n++ {
		got = append(got, c.backoff(n))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("backoff %v, want %v", got, want)
	}
}

func TestBoundaryReleaseWakesTaskBehind(t *testing.T) {
	// a takes 5 of 6 units; b needs 3 and waits. At a's sequence break a
	// asks for its last 3 items only, which leaves room for b: the release
	// must wake the dispatcher (the clock is never stepped).
	b := mkTask("b", 2, 3, 3)
	b.Estimate.BatchMin = 3
	h := newHarness(t, Config{}, 6, mkTask("a", 1, 8, 5), b)
	fa := h.run.nth(t, "a", 0)
	h.obs.waitEvent(t, "b waiting", func(e Event) bool { return e.Task == "b" && e.Type == EventWaiting })
	fa.ok()
	if fa2 := h.run.nth(t, "a", 1); fa2.b.Size != 3 {
		t.Errorf("a's second batch has %d items, want 3", fa2.b.Size)
	}
	h.run.nth(t, "b", 0)
}

func TestMissingDependencyGetsADidYouMean(t *testing.T) {
	f := mkTask("features", 1, 2, 2)
	m := mkTask("matching", 2, 2, 2)
	m.DependsOn = []string{"featurs", "ghost"}
	h := newHarness(t, Config{}, 100, f, m)
	w := h.obs.waitEvent(t, "matching missing", func(ev Event) bool { return ev.Task == "matching" && ev.Type == EventWaiting })
	if w.Reason != v1alpha1.ReasonDependencyMissing || w.Message != "no such task: featurs (did you mean features?), ghost" {
		t.Errorf("matching: %+v", w)
	}
}

// Busy says whether a task is pending or holds a worker: true from the
// first Upsert (in order or not, which leaves the dispatch list to be
// rebuilt), false once every task is removed and a scan dropped them.
func TestBusy(t *testing.T) {
	adm := &benchAdm{admit: "none"}
	var admitted *entry
	q := newBenchQueue(adm, &countingObserver{}, &admitted)
	if q.Busy() {
		t.Fatal("an empty queue is busy")
	}
	for _, c := range []struct {
		name string
		seq  int64
	}{{"b", 2}, {"a", 1}} { // a comes before b: the list is to be rebuilt
		if err := q.Upsert(mkTask(c.name, c.seq, 1, 1)); err != nil {
			t.Fatal(err)
		}
		if !q.Busy() {
			t.Fatalf("not busy with %s pending", c.name)
		}
	}
	q.scanOnce()
	for _, name := range []string{"a", "b"} {
		if err := q.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	q.scanOnce()
	if q.Busy() {
		t.Error("busy once every task is removed and a scan ran")
	}
}

// transientErr is a Start error that may pass, like runner.PrepareError.
type transientErr struct{ msg string }

func (e transientErr) Error() string   { return e.msg }
func (e transientErr) Transient() bool { return true }

// A batch that cannot be prepared (a full state disk) leaves the task
// Pending with the reason shown and its reservation released, then tries
// again with backoff: never Failed, its retries (none here) untouched.
func TestPrepareFailureWaitsAndRetriesWithoutSpendingRetries(t *testing.T) {
	a := mkTask("a", 1, 4, 4)
	a.Retries = 0
	h := newHarness(t, Config{RetryBackoff: time.Second, MaxRetryBackoff: time.Minute}, 100)
	var mu sync.Mutex
	refusals := 3
	h.run.startErr = func(Batch) error {
		mu.Lock()
		defer mu.Unlock()
		if refusals == 0 {
			return nil
		}
		refusals--
		return fmt.Errorf("start batch 0 of a: open log: %w", transientErr{"no space left on device"})
	}
	if err := h.q.Upsert(a); err != nil {
		t.Fatal(err)
	}
	delay := time.Second
	for i := 0; i < 3; i++ {
		p := h.obs.waitEvent(t, fmt.Sprintf("refusal %d", i+1), func(e Event) bool {
			return e.Task == "a" && e.Type == EventPhase && e.Phase == v1alpha1.PhasePending && e.Reason == ReasonPrepareFailed &&
				strings.Contains(e.Message, "trying again in "+delay.String())
		})
		if !strings.Contains(p.Message, "no space left") {
			t.Errorf("Pending message %q does not say why", p.Message)
		}
		h.adm.mu.Lock()
		held := h.adm.grants - h.adm.releases
		h.adm.mu.Unlock()
		if held != 0 {
			t.Errorf("refusal %d: %d reservations held while waiting", i+1, held)
		}
		h.clk.Step(delay - time.Millisecond)
		if !h.clk.HasWaiters() {
			t.Fatalf("refusal %d: tried again before %v", i+1, delay)
		}
		h.clk.Step(time.Millisecond)
		delay *= 2
	}
	h.run.nth(t, "a", 0).ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
	for _, e := range h.q.History() {
		if e.Task == "a" && e.Phase == v1alpha1.PhaseFailed {
			t.Errorf("a went Failed: %q", e.Message)
		}
	}
}

// waitWorking waits until q.Working() is want, failing the test after guard.
func waitWorking(t *testing.T, q *Queue, want int, when string) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		n := q.Working()
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Working %d %s, want %d", n, when, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDrainLeavesEachTaskAtItsBatchBoundary: while the queue drains, the
// batch in flight runs to its end (never cancelled), its task is then left
// Pending (ReasonDraining) with its progress and its reservation released
// once; a task paused between batches and one waiting for admission start
// nothing; Working reaches 0. Once the drain ends, each task goes on from
// its committed progress.
func TestDrainLeavesEachTaskAtItsBatchBoundary(t *testing.T) {
	h := newHarness(t, Config{}, 6, mkTask("a", 1, 6, 3), mkTask("b", 2, 6, 3), mkTask("c", 3, 6, 3))
	fa := h.run.nth(t, "a", 0)
	fb := h.run.nth(t, "b", 0)
	h.q.SetPaused("b", true)
	h.obs.waitPhase(t, "b", v1alpha1.PhasePaused) // b's batch stopped
	h.q.Drain(true)
	fa.ok()
	st := h.obs.waitPhase(t, "a", v1alpha1.PhasePending)
	if st.Reason != ReasonDraining || st.ItemsDone != 3 || st.Contract != nil {
		t.Errorf("a drained: %+v", st)
	}
	if _, _, c := fa.counts(); c != 0 {
		t.Errorf("a's batch was cancelled %d times while draining", c)
	}
	// b is stopped mid-batch: the drain waits for it. a's worker may still
	// be returning after its Pending phase was published, so wait for it.
	waitWorking(t, h.q, 1, "with b's batch stopped")
	h.q.SetPaused("b", false)
	fb.ok()
	h.obs.waitPhase(t, "b", v1alpha1.PhasePending)
	waitWorking(t, h.q, 0, "after every batch ended")
	if n := h.adm.activeCount(); n != 0 {
		t.Errorf("%d reservations held while drained", n)
	}
	if h.run.started("a") != 1 || h.run.started("b") != 1 || h.run.started("c") != 0 {
		t.Errorf("started a %d b %d c %d while draining, want 1 1 0", h.run.started("a"), h.run.started("b"), h.run.started("c"))
	}
	h.q.Drain(false)
	h.run.nth(t, "a", 1).ok()
	h.run.nth(t, "b", 1).ok()
	h.run.nth(t, "c", 0).ok()
	h.run.nth(t, "c", 1).ok()
	for _, name := range []string{"a", "b", "c"} {
		h.obs.waitPhase(t, name, v1alpha1.PhaseDone)
	}
}
