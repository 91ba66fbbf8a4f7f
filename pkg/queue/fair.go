package queue

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/share"
)

// Reasons of the fair order and the quotas.
const (
	// ReasonFairShare: the task waits while a task of an account below its
	// share waits for the governor ahead of it; at a sequence break, a
	// task yields its next batch so.
	ReasonFairShare = "FairShare"
	// ReasonQuota: the task's account holds what its quota allows.
	ReasonQuota = "Quota"
)

// class is what orders an entry against entries of other accounts or
// priorities; within one class the seed's FIFO holds.
type class struct {
	account  string
	priority int64
}

func classOf(e *entry) class { return class{e.task.Account, e.task.Priority} }

// lockedNoteClass notes e entering the dispatch list: a second class
// makes the list mixed. REQUIRES: q.mu held.
func (q *Queue) lockedNoteClass(e *entry) {
	if len(q.mu.pending) == 0 && !q.mu.pendingDirty && !q.mu.mixed {
		q.mu.class0 = classOf(e)
		return
	}
	if classOf(e) != q.mu.class0 {
		q.mu.mixed = true
	}
}

// lockedReclass tells, from the dispatch list, whether it is mixed.
// REQUIRES: q.mu held.
func (q *Queue) lockedReclass() {
	q.mu.mixed = false
	for i, e := range q.mu.pending {
		if i == 0 {
			q.mu.class0 = classOf(e)
		} else if classOf(e) != q.mu.class0 {
			q.mu.mixed = true
			return
		}
	}
}

// ranker is the fair order of one pass: priority first (aged: a class
// waiting rises toward the highest priority pending, reaching it after
// Config.PriorityMaxAge), then the account that used the least of its
// share (share.Ledger.Key), then the seed's (Seq, Name).
type ranker struct {
	now time.Time
	// keys are the accounts' usage per share; prio each class's aged
	// priority; standing each account's, among the accounts with work.
	keys     map[string]float64
	prio     map[class]float64
	aged     map[class]bool
	standing map[string]share.Standing
}

// lockedRanker builds the order of the pending entries list (and of
// until, a task at its sequence break). REQUIRES: q.mu held.
func (q *Queue) lockedRanker(now time.Time, list []*entry, until *entry) *ranker {
	r := &ranker{now: now, keys: map[string]float64{}, prio: map[class]float64{}, aged: map[class]bool{}}
	oldest := map[class]time.Time{}
	var top int64
	first := true
	var accts []string
	for _, e := range list {
		c := classOf(e)
		if t, ok := oldest[c]; !ok || e.pendingSince.Before(t) {
			oldest[c] = e.pendingSince
		}
		if first || e.task.Priority > top {
			top, first = e.task.Priority, false
		}
		if _, ok := r.keys[c.account]; !ok {
			r.keys[c.account] = q.mu.ledger.Key(c.account, now)
			accts = append(accts, c.account)
		}
	}
	for _, e := range q.mu.tasks {
		if e.state == stateActive {
			if _, ok := r.keys[e.task.Account]; !ok {
				r.keys[e.task.Account] = q.mu.ledger.Key(e.task.Account, now)
				accts = append(accts, e.task.Account)
			}
		}
	}
	maxAge := q.cfg.PriorityMaxAge.Seconds()
	for c, since := range oldest {
		p := float64(c.priority)
		f := min(1, now.Sub(since).Seconds()/maxAge)
		if float64(top) > p {
			p += (float64(top) - p) * f
		}
		r.prio[c] = p
		r.aged[c] = f >= 1 && c.priority < top
	}
	if until != nil {
		if _, ok := r.prio[classOf(until)]; !ok {
			r.prio[classOf(until)] = float64(until.task.Priority)
		}
	}
	r.standing = make(map[string]share.Standing, len(accts))
	for _, st := range q.mu.ledger.Standings(accts, now) {
		r.standing[st.Account] = st
	}
	return r
}

// rank is where an entry stands in a pass's order.
type rank struct {
	prio, key float64
	e         *entry
}

// rankOf is e's rank in the pass.
func (r *ranker) rankOf(e *entry) rank {
	c := classOf(e)
	return rank{prio: r.prio[c], key: r.keys[c.account], e: e}
}

// compareRanks orders two ranks, the first to be asked first: the higher
// aged priority, then the lower usage per share, then (Seq, Name).
func compareRanks(a, b rank) int {
	return cmp.Or(
		cmp.Compare(b.prio, a.prio),
		cmp.Compare(a.key, b.key),
		cmp.Compare(a.e.task.Seq, b.e.task.Seq),
		cmp.Compare(a.e.task.Name, b.e.task.Name))
}

// holds reports whether h, told to wait by the governor, holds e, ranked
// after it, of another class: h has a higher (aged) priority, or the same
// and its account used less of its share than e's and less than its
// share, or its class waited past PriorityMaxAge. Else e may take what h
// waits for (the seed's bypass of a Wait): between equals nothing is
// reserved ahead.
func (r *ranker) holds(h, e *entry) bool {
	ch, ce := classOf(h), classOf(e)
	if ch == ce {
		return false
	}
	ph, pe := r.prio[ch], r.prio[ce]
	if ph != pe {
		return ph > pe
	}
	return r.aged[ch] || r.keys[ch.account] < r.keys[ce.account] && r.standing[ch.account].Below()
}

// holdMessage says why e waits behind h, with the numbers.
func (r *ranker) holdMessage(h, e *entry) string {
	hs, es := r.standing[h.task.Account], r.standing[e.task.Account]
	if ph, pe := r.prio[classOf(h)], r.prio[classOf(e)]; ph != pe {
		return fmt.Sprintf("task %s (priority %d, %.0f with its wait) waits for the governor ahead of this one (priority %d, %.0f): lower priorities yield to it",
			h.task.Name, h.task.Priority, ph, e.task.Priority, pe)
	}
	return fmt.Sprintf("%s's share: %.2f of %.2f used, its task %s waits for the governor; %s's share: %.2f of %.2f used: %s's tasks yield at their next batch",
		name(hs.Account), hs.UsageFraction, hs.ShareFraction, h.task.Name, name(es.Account), es.UsageFraction, es.ShareFraction, name(es.Account))
}

// name is an account as people read it.
func name(acct string) string {
	if acct == "" {
		return "(no account)"
	}
	return acct
}

// lockedScanFair is lockedScan for a mixed dispatch list: the pass walks
// the pending entries in the ranker's order. Once an entry is told to wait
// by the governor, the entries after it that it holds (ranker.holds) wait
// too (ReasonFairShare) instead of taking what it waits for; within its
// class (account and priority) the seed's bypass of a Wait holds. With
// until set, only the entries ranked before it are tried, and it reports
// in hold the entry it must yield to (nil: none).
// REQUIRES: q.mu held; the list rebuilt.
func (q *Queue) lockedScanFair(until *entry, refreshed bool) (waiting bool, hold string) {
	q.mu.parked, q.mu.parkedWait = parkedTail{}, waitRun{}
	list := slices.DeleteFunc(q.mu.pending, func(e *entry) bool {
		if e.state != statePending {
			e.inList = false
			return true
		}
		return false
	})
	q.mu.pending = list
	r := q.lockedRanker(q.clock.Now(), list, until)
	// Each entry's rank is looked up once, not at every comparison.
	order := make([]rank, len(list))
	for i, e := range list {
		order[i] = r.rankOf(e)
	}
	slices.SortFunc(order, compareRanks)
	var last rank
	if until != nil {
		last = r.rankOf(until)
	}
	s := scan{refreshed: refreshed, fair: r}
	for _, o := range order {
		e := o.e
		if until != nil && compareRanks(o, last) >= 0 {
			break
		}
		if !q.lockedTry(e, &s) {
			continue
		}
		if s.toldWait && s.hold == nil {
			s.hold = e
		}
	}
	if until != nil && s.hold != nil && r.holds(s.hold, until) {
		hold = r.holdMessage(s.hold, until)
	}
	q.mu.pending = slices.DeleteFunc(q.mu.pending, func(e *entry) bool {
		if e.state != statePending {
			e.inList = false
			return true
		}
		return false
	})
	q.lockedReclass()
	return s.waiting, hold
}

// Standing is one account's place in the queue (Queue.Shares).
type Standing struct {
	share.Standing
	// Pending counts its pending tasks.
	Pending int
}

// Shares lists the accounts with work (a task pending or holding a
// worker), in name order, with their shares, usage and what they hold.
func (q *Queue) Shares() []Standing {
	q.mu.Lock()
	defer q.mu.Unlock()
	pending := map[string]int{}
	var accts []string
	for _, e := range q.mu.tasks {
		switch e.state {
		case statePending:
			pending[e.task.Account]++
			accts = append(accts, e.task.Account)
		case stateActive:
			accts = append(accts, e.task.Account)
		}
	}
	var out []Standing
	for _, st := range q.mu.ledger.Standings(accts, q.clock.Now()) {
		out = append(out, Standing{Standing: st, Pending: pending[st.Account]})
	}
	return out
}

// HalfLife is the fair share's usage half-life in force.
func (q *Queue) HalfLife() time.Duration { return q.mu.ledger.HalfLife() }
