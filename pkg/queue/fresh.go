package queue

import (
	"context"
	"time"
)

// FreshWaiter is an Admitter whose snapshots are taken elsewhere (the
// controller's prober goroutine) rather than in Refresh. WaitFresh asks for
// a snapshot and blocks, with no lock of the queue held, until the governor
// has one taken after the call, ctx ends, or the Admitter's own bound
// passes.
type FreshWaiter interface {
	WaitFresh(ctx context.Context)
}

// awaitFresh runs between a batch's end and its sequence break, without
// q.mu: the next contract is then computed on a snapshot taken after the
// batch's processes ended, so the memory they freed is seen (the seed's
// "release, take a new snapshot, get a fresh contract").
func (q *Queue) awaitFresh(e *entry) {
	if w, ok := q.adm.(FreshWaiter); ok {
		w.WaitFresh(e.ctx)
	}
}

// SnapshotCounter is an Admitter that numbers the snapshots it decides
// on, taken elsewhere at a pace of their own (the controller's prober,
// which probes seldom while the queue is idle). A task handed to the
// queue (Replace of a new generation, an unpause) while the snapshot is
// stale waits, with no verdict and holding back the tasks behind it,
// until one taken after it came, or freshWaitMax: the first admission
// after an idle spell decides on the machine as it is, as the others do
// on a snapshot at most the probe pace old. Whoever hands in the tasks
// never waits for a probe.
type SnapshotCounter interface {
	// FreshMark returns the number of the latest snapshot and whether it
	// is too old to decide on for a task handed now; when it is, it asks
	// for a new one and wakes the queue (Queue.Wake) once it is taken.
	// Called with the queue's mutex held: it must not block.
	FreshMark() (mark uint64, stale bool)
	// Snapshots is the number of the latest snapshot.
	Snapshots() uint64
}

// freshWaitMax bounds how long a task waits for a fresh snapshot (a probe
// stuck in nvidia-smi): it is then decided on the last one.
const freshWaitMax = 250 * time.Millisecond

// lockedMarkFresh makes e wait for a snapshot taken after now, when the
// Admitter says the latest is stale. REQUIRES: q.mu held.
func (q *Queue) lockedMarkFresh(e *entry) {
	sc, ok := q.adm.(SnapshotCounter)
	if !ok {
		return
	}
	if mark, stale := sc.FreshMark(); stale {
		e.freshAfter, e.freshBy = mark, q.clock.Now().Add(freshWaitMax)
	}
}

// lockedAwaitsFresh reports whether e still waits for a fresh snapshot.
// REQUIRES: q.mu held.
func (q *Queue) lockedAwaitsFresh(e *entry) bool {
	if e.freshBy.IsZero() {
		return false
	}
	if q.adm.(SnapshotCounter).Snapshots() <= e.freshAfter && q.clock.Now().Before(e.freshBy) {
		return true
	}
	e.freshAfter, e.freshBy = 0, time.Time{}
	return false
}
