package queue

import (
	"fmt"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// tries is how many entries the passes so far looked at.
func (h *harness) tries() int {
	h.q.mu.Lock()
	defer h.q.mu.Unlock()
	return h.q.mu.tries
}

// waitReason waits until task's last event is a wait for reason.
func (o *recorder) waitReason(t testing.TB, task, reason string) {
	t.Helper()
	o.waitUntil(t, task+" waiting for "+reason, func() bool {
		for i := len(o.events) - 1; i >= 0; i-- {
			if e := o.events[i]; e.Task == task {
				return e.Type == EventWaiting && e.Reason == reason
			}
		}
		return false
	})
}

// Five hundred tasks behind one worker slot: once a pass has told the tail
// to wait for a worker, the passes that follow while nothing in the queue
// changed leave it as it is (a pass costs the head, not the list), yet a
// task paused in the tail gets its new reason, a task with a dependency
// keeps every pass walking, and when the slot frees the next task in FIFO
// order runs.
func TestBlockedPassesSkipTheParkedTail(t *testing.T) {
	const n = 500
	var tasks []Task
	for i := range n {
		tasks = append(tasks, mkTask(fmt.Sprintf("t%03d", i), int64(i+1), 1, 1))
	}
	h := newHarnessWith(t, Config{MaxParallel: 1}, 1000, nil, nil, tasks...)
	head := h.run.nth(t, "t000", 0)
	h.obs.waitReason(t, fmt.Sprintf("t%03d", n-1), ReasonMaxParallel)
	h.q.scanOnce() // a full pass, blocked: the tail is parked
	before := h.tries()
	for range 20 {
		h.q.scanOnce()
	}
	if got := h.tries() - before; got > 20 {
		t.Errorf("20 blocked passes over %d parked tasks looked at %d entries, want at most one each", n-1, got)
	}

	// A change in the tail: the next pass walks it and gives the new verdict.
	if err := h.q.SetPaused("t400", true); err != nil {
		t.Fatal(err)
	}
	h.obs.waitReason(t, "t400", v1alpha1.ReasonPaused)
	if err := h.q.SetPaused("t400", false); err != nil {
		t.Fatal(err)
	}
	h.obs.waitReason(t, "t400", ReasonMaxParallel)

	// A task with a dependency in the tail: no tail is parked.
	dep := mkTask("zdep", n+1, 1, 1)
	dep.DependsOn = []string{"t499"}
	if err := h.q.Upsert(dep); err != nil {
		t.Fatal(err)
	}
	h.obs.waitReason(t, "zdep", v1alpha1.ReasonWaitingForDependencies)
	h.q.scanOnce()
	before = h.tries()
	h.q.scanOnce()
	if got := h.tries() - before; got < n {
		t.Errorf("a blocked pass with a dependency in the tail looked at %d entries, want the whole list (%d)", got, n)
	}

	// The slot frees: the next in FIFO order runs, not a later one.
	head.ok()
	h.obs.waitPhase(t, "t000", v1alpha1.PhaseDone)
	h.run.nth(t, "t001", 0).ok()
	h.run.nth(t, "t002", 0).ok()
	h.obs.waitPhase(t, "t002", v1alpha1.PhaseDone)
	h.run.mu.Lock()
	order := make([]string, 0, len(h.run.batches))
	for _, b := range h.run.batches {
		order = append(order, b.b.Task)
	}
	h.run.mu.Unlock()
	if len(order) < 3 || order[0] != "t000" || order[1] != "t001" || order[2] != "t002" {
		t.Errorf("batches started in the order %v, want t000 t001 t002 first", order)
	}
}
