package reconcile

import (
	"container/heap"
	"time"
)

// dueQueue orders the dirty statuses by when each one's write is due, so
// that a pass pops what is due instead of walking every dirty status
// (thousands of queued tasks wait for QueuedWriteDelay at once).
//
// Each dirty record has one live item, whose time is
// pendingWrite.dueItemAt; its other items are stale and dropped when
// popped. An item's time is never later than the record's due write:
// what makes a write due sooner (a phase change, a batch's commit) comes
// as a request, whose record apply schedules again; what makes it later
// (a write, a retry's backoff) leaves the item early, and a popped item
// not due yet is pushed back at the record's current time.
type dueQueue []dueItem

type dueItem struct {
	at time.Time
	p  *pendingWrite
}

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(dueItem)) }
func (q *dueQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = dueItem{}
	*q = old[:len(old)-1]
	return it
}

// schedule makes p's live item due at, unless a live item is due no later.
func (w *statusWriter) schedule(p *pendingWrite, at time.Time) {
	if !p.dueItemAt.IsZero() && !at.Before(p.dueItemAt) {
		return
	}
	p.dueItemAt = at
	heap.Push(&w.due, dueItem{at: at, p: p})
}

// current reports whether p is the writer's record of its path and holds
// a status to write.
func (w *statusWriter) current(p *pendingWrite) bool {
	return w.files[p.path] == p && p.dirty()
}

// popDue takes from the queue every dirty record whose write is due at now.
func (w *statusWriter) popDue(now time.Time) []*pendingWrite {
	var due []*pendingWrite
	for len(w.due) > 0 && !now.Before(w.due[0].at) {
		it := heap.Pop(&w.due).(dueItem)
		w.duePopped++
		p := it.p
		if !it.at.Equal(p.dueItemAt) {
			continue // stale: the live item is another
		}
		p.dueItemAt = time.Time{}
		if !w.current(p) {
			continue
		}
		if at := w.dueAt(p, now); now.Before(at) {
			w.schedule(p, at)
			continue
		}
		due = append(due, p)
	}
	return due
}

// nextDue is how long until the queue's head is due (0: nothing waits).
func (w *statusWriter) nextDue(now time.Time) time.Duration {
	if len(w.due) == 0 {
		return 0
	}
	if d := w.due[0].at.Sub(now); d > 0 {
		return d
	}
	return time.Millisecond
}
