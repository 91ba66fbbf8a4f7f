package queue

import (
	"sync"
	"testing"
	"time"
)

// countingAdm is a fake admitter whose snapshots are numbered elsewhere
// (SnapshotCounter): the test says whether the latest is stale and when a
// new one is taken.
type countingAdm struct {
	*fakeAdm
	mu        sync.Mutex
	snapshots uint64
	stale     bool
	marks     int
}

func (a *countingAdm) FreshMark() (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.marks++
	return a.snapshots, a.stale
}

func (a *countingAdm) Snapshots() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.snapshots
}

func (a *countingAdm) snapshot() {
	a.mu.Lock()
	a.snapshots++
	a.stale = false
	a.mu.Unlock()
}

func (h *harness) grants() int {
	h.adm.mu.Lock()
	defer h.adm.mu.Unlock()
	return h.adm.grants
}

// TestTasksHandedOnAStaleSnapshotWaitForAFreshOne: a task handed to the
// queue while the snapshot is stale is not decided on it, nor is any task
// behind it (FIFO); the next snapshot admits both, in order. Whoever
// handed them did not wait.
func TestTasksHandedOnAStaleSnapshotWaitForAFreshOne(t *testing.T) {
	var ca *countingAdm
	h := newHarnessWith(t, Config{}, 100, func(a *fakeAdm) Admitter {
		ca = &countingAdm{fakeAdm: a, snapshots: 5, stale: true}
		return ca
	}, nil)
	if _, err := h.q.Replace(mkTask("a", 1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	// b comes when the snapshot is fresh again, but behind a.
	ca.mu.Lock()
	ca.stale = false
	ca.mu.Unlock()
	if _, err := h.q.Replace(mkTask("b", 2, 2, 2)); err != nil {
		t.Fatal(err)
	}
	h.q.scanOnce()
	if g := h.grants(); g != 0 {
		t.Fatalf("%d reservations granted on the stale snapshot", g)
	}
	ca.snapshot() // the one a waits for
	h.q.Wake()
	h.run.nth(t, "a", 0).ok()
	h.run.nth(t, "b", 0).ok()
	if ca.marks != 2 {
		t.Errorf("%d marks taken, want one per task handed", ca.marks)
	}
}

// TestAStuckProbeHoldsATaskAtMostFreshWaitMax: when no fresh snapshot
// comes (a probe stuck in nvidia-smi), the task is decided on the last
// one once freshWaitMax has passed.
func TestAStuckProbeHoldsATaskAtMostFreshWaitMax(t *testing.T) {
	h := newHarnessWith(t, Config{}, 100, func(a *fakeAdm) Admitter {
		return &countingAdm{fakeAdm: a, snapshots: 5, stale: true}
	}, nil)
	if _, err := h.q.Replace(mkTask("a", 1, 2, 2)); err != nil {
		t.Fatal(err)
	}
	h.q.scanOnce()
	if g := h.grants(); g != 0 {
		t.Fatalf("%d reservations granted before freshWaitMax", g)
	}
	h.clk.Step(freshWaitMax + time.Millisecond)
	h.q.Wake()
	h.run.nth(t, "a", 0).ok()
}
