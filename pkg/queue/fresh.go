package queue

import "context"

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
