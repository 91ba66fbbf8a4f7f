package reconcile

import (
	"slices"
	"time"
)

// flushMax bounds how many statuses one pass of the status writer writes
// (one group commit). A flood of new manifests makes each of them due at once, and
// each first write of a file is its costly one (the whole-file
// self-check): bounded, the writer takes the owner's newer versions
// between groups, so that a status that changed is not written twice.
// What is left is written by the next pass, within a millisecond.
const flushMax = 64

// limitDue keeps at most max of due, most pressing first: committed
// progress, then phase changes (oldest first), then the rest (least
// recently written first). It returns the kept ones and how many wait;
// due is sorted in place, so the ones that wait follow the kept ones
// (kept[len(kept):len(kept)+waiting]).
func limitDue(due []*pendingWrite, max int) ([]*pendingWrite, int) {
	if len(due) <= max {
		return due, 0
	}
	rank := func(e *pendingWrite) int {
		switch {
		case e.commit:
			return 0
		case !e.urgentAt.IsZero():
			return 1
		}
		return 2
	}
	since := func(e *pendingWrite) time.Time {
		if !e.urgentAt.IsZero() {
			return e.urgentAt
		}
		return e.lastWrite
	}
	slices.SortFunc(due, func(a, b *pendingWrite) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return since(a).Compare(since(b))
	})
	return due[:max], len(due) - max
}
