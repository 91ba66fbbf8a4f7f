package reconcile

import (
	"container/heap"
	"time"
)

// dueQueue orders the dirty statuses by when each one's write is due, so
// that a flush pops what is due instead of walking every dirty status
// (thousands of queued tasks wait for QueuedWriteDelay at once).
//
// Each dirty entry has one live item, whose time is entry.dueItemAt; other
// items of the entry are stale and dropped when popped. An item's time is
// never later than the entry's due write: what makes a write due sooner
// (a phase change, a batch's commit) goes through markDirty, whose entry
// flush pushes again; what makes it later (a write, a retry's backoff)
// leaves the item early, and a popped item not due yet is pushed back at
// the entry's current time.
type dueQueue []dueItem

type dueItem struct {
	at time.Time
	e  *entry
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

// schedule makes e's live item due at, unless a live item is due no later.
func (c *Controller) schedule(e *entry, at time.Time) {
	if !e.dueItemAt.IsZero() && !at.Before(e.dueItemAt) {
		return
	}
	e.dueItemAt = at
	heap.Push(&c.due, dueItem{at: at, e: e})
}

// isDirty reports whether e is a current entry with a status to write.
func (c *Controller) isDirty(e *entry) bool {
	if c.entries[e.path] != e {
		return false
	}
	_, ok := c.dirty[e.path]
	return ok
}

// popDue takes from the queue every dirty entry whose write is due at now.
func (c *Controller) popDue(now time.Time) []*entry {
	var due []*entry
	for len(c.due) > 0 && !now.Before(c.due[0].at) {
		it := heap.Pop(&c.due).(dueItem)
		c.duePopped++
		e := it.e
		if !it.at.Equal(e.dueItemAt) {
			continue // stale: the live item is another
		}
		e.dueItemAt = time.Time{}
		if !c.isDirty(e) {
			continue
		}
		if at := c.dueAt(e, now); now.Before(at) {
			c.schedule(e, at)
			continue
		}
		due = append(due, e)
	}
	return due
}

// requeueDirty rebuilds the queue from the dirty set (after a flush of
// every dirty status).
func (c *Controller) requeueDirty(now time.Time) {
	c.due = c.due[:0]
	for _, e := range c.entries {
		e.dueItemAt = time.Time{}
	}
	for path := range c.dirty {
		if e := c.entries[path]; e != nil {
			c.schedule(e, c.dueAt(e, now))
		}
	}
}

// nextDue is how long until the queue's head is due (0: nothing waits).
func (c *Controller) nextDue(now time.Time) time.Duration {
	if len(c.marked) > 0 {
		return time.Millisecond // marked during the writes: looked at soon
	}
	if len(c.due) == 0 {
		return 0
	}
	if d := c.due[0].at.Sub(now); d > 0 {
		return d
	}
	return time.Millisecond
}
