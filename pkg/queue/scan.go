package queue

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// scanOnce is one dispatch step: it walks the pending tasks in FIFO order and
// starts a worker for each one the governor admits. It reports whether a task
// told Wait remains, in which case the dispatcher rescans after RescanWait.
func (q *Queue) scanOnce() (waiting bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lockedScan(nil, false)
}

// scan is the state of one pass.
type scan struct {
	// refreshed is set once adm.Refresh was called during the pass.
	refreshed bool
	// waiting is set when a task was told Wait.
	waiting bool
	// awaitFresh is set once a task waits for a fresh snapshot.
	awaitFresh bool
	// maxParallelMsg is formatted once per pass.
	maxParallelMsg string
	// peers is lockedPeers, counted once per pass (peersCounted).
	peers        int
	peersCounted bool
	// blockedFrom is the first entry the pass told to wait for a worker;
	// tailDeps is set when an entry from there on has dependencies (their
	// verdicts move with other tasks' phases: no tail is parked).
	blockedFrom *entry
	tailDeps    bool
	// waits holds the governor's Wait answers of this pass, by estimate,
	// until it grants a reservation: the same question, with nothing
	// reserved since, gets the same answer, so a flood of identical
	// pending tasks costs one decision per pass, not one per task.
	// Once it holds passMemoMax answers (full), the questions are not
	// repeating: the rest of the pass neither looks in it nor adds to it,
	// until a grant empties it. The map holds indexes in waitDecs: a
	// Decision is too large to be kept in a map's slot, each would be an
	// allocation.
	waits    map[governor.Estimate]int32
	waitDecs []governor.Decision
	// learned holds the Learner's answers of this pass, by what they
	// depend on, until a reservation is granted (a provisional estimate
	// depends on the memory free); the book changes only in Observe,
	// under Queue.mu, which the pass holds. Bounded as waits is.
	learned map[learnKey]governor.Estimate
	// last is the latest question of each kind and its answer, checked
	// before the maps: the tasks of a flood come in runs of the same
	// question, and comparing is cheaper than hashing.
	lastLearn     learnKey
	lastLearned   governor.Estimate
	haveLastLearn bool
	lastWaitEst   governor.Estimate
	lastWait      governor.Decision
	haveLastWait  bool
	// toldWait is set by lockedTry when the governor told the entry it
	// tried to wait: for the estimate lastWaitEst, with lastWait.
	toldWait bool
	// waitSeq counts the answers lastWait held in the pass; learnSeq the
	// questions lastLearn held, and toldLearn is learnSeq when the entry
	// tried last took its estimate from the Learner (-1 otherwise). Two
	// entries with the same waitSeq had the same estimate and answer; two
	// with the same toldLearn, the same learnKey.
	waitSeq, learnSeq, toldLearn int
	// runFrom is the first entry of the pass's latest run of entries
	// told to wait with the same answer (runSeq, their waitSeq) to the
	// same question (runLearn, their toldLearn; for a learning task, the
	// memory cap of runFrom too), nil when none is under way.
	runFrom          *entry
	runSeq, runLearn int
	// fair is the pass's order in a mixed list (lockedScanFair), nil in
	// the seed's; hold is the first entry of it told to wait by the
	// governor: the entries after it that it holds wait too.
	fair *ranker
	hold *entry
	// quota holds, by account, the quota a task of it would cross in
	// this pass: its later tasks wait with it (FIFO within the account).
	quota map[string]string
}

// waitRun is a run of pending entries a whole pass told to wait, from the
// entry from to the end of the dispatch list, each with the answer dec to
// the estimate est, the same for each: a task that does not learn has the
// estimate est whatever the pass; one that learns (learns) has the
// learnKey key and the memory cap memCap. None has dependencies. Until an
// entry changes (the epoch moves), a pass in which an entry of the run
// gets that answer again to that question leaves the rest of the run as
// it is: each would get it too (the same question, nothing reserved
// since) and holds it already. Under a flood of identical tasks waiting
// for the governor, a pass then costs its head, not the ten thousand
// entries behind it.
type waitRun struct {
	from   *entry
	learns bool
	key    learnKey
	memCap int64
	est    governor.Estimate
	dec    governor.Decision
	epoch  uint64 // the epoch it was parked at
}

// follow extends the pass's run with e, the entry just tried and still
// pending, or starts one at e, or ends it.
func (s *scan) follow(e *entry) {
	switch {
	case !s.toldWait || len(e.task.DependsOn) > 0:
		s.runFrom = nil
	case s.runFrom != nil && s.waitSeq == s.runSeq && s.toldLearn == s.runLearn && (s.toldLearn < 0 || e.memCap == s.runFrom.memCap):
	default:
		s.runFrom, s.runSeq, s.runLearn = e, s.waitSeq, s.toldLearn
	}
}

// parked is the waitRun of the pass's run, which reached the end of the
// dispatch list at epoch; from nil when there is none.
func (s *scan) parked(epoch uint64) waitRun {
	from := s.runFrom
	if from == nil {
		return waitRun{}
	}
	w := waitRun{from: from, learns: s.runLearn >= 0, memCap: from.memCap, est: s.lastWaitEst, dec: s.lastWait, epoch: epoch}
	if w.learns {
		w.key = keyOf(from)
	}
	return w
}

// holds reports whether e, just tried in pass s, was told the run's
// answer to the run's question. REQUIRES: q.mu held.
func (w *waitRun) holds(q *Queue, e *entry, s *scan) bool {
	if !s.toldWait || len(e.task.DependsOn) > 0 || s.lastWaitEst != w.est || s.lastWait != w.dec || q.learns(e) != w.learns {
		return false
	}
	return !w.learns || (e.memCap == w.memCap && keyOf(e) == w.key)
}

// passMemoMax bounds each memo of a pass (scan.waits, scan.learned): with
// an entry for each of ten thousand pending tasks that all ask different
// questions, a pass took 5.0 ms instead of 0.42 ms without a memo
// (BenchmarkScan/pending=10000) and allocated 5.6 MB; bounded, 0.56 ms.
// A queue whose questions repeat repeats some of its first ones (a flood
// is runs of one question, which scan.lastWait answers before the map).
const passMemoMax = 16

// full reports whether a memo of n answers is full (passMemoMax).
func full(n int) bool { return n >= passMemoMax }

// learnKey is everything a Learner's estimate of a task depends on besides
// the Learner's own state (Learner.Estimate).
type learnKey struct {
	est               governor.Estimate
	profile           string
	mode              v1alpha1.EstimateMode
	kills             Kills
	total, done       int64
	inputBytesPerItem float64
}

// keyOf is e's learnKey.
func keyOf(e *entry) learnKey {
	t := &e.task
	return learnKey{est: t.Estimate, profile: t.Profile, mode: t.Mode, kills: e.kills, total: t.ItemsTotal, done: t.ItemsDone, inputBytesPerItem: t.InputBytesPerItem}
}

// lockedPassEstimate is lockedEstimate, asking the Learner once per distinct
// question in the pass. REQUIRES: q.mu held.
func (q *Queue) lockedPassEstimate(e *entry, s *scan) governor.Estimate {
	if !s.peersCounted {
		// Once a pass: each admission moves a task from the queued ready
		// ones to those holding a worker, the count stays.
		s.peers, s.peersCounted = q.lockedPeers(), true
	}
	if !q.learns(e) {
		return q.cappedEstimate(e, e.task.Estimate, s.peers)
	}
	t := &e.task
	k := keyOf(e)
	if s.haveLastLearn && s.lastLearn == k {
		s.toldLearn = s.learnSeq
		return q.cappedEstimate(e, s.lastLearned, s.peers)
	}
	learnedFull := full(len(s.learned))
	est, ok := governor.Estimate{}, false
	if !learnedFull {
		est, ok = s.learned[k]
	}
	if !ok {
		est = q.learn.Estimate(t, e.kills)
		if !learnedFull {
			if s.learned == nil {
				s.learned = make(map[learnKey]governor.Estimate, passMemoMax)
			}
			s.learned[k] = est
		}
	}
	s.lastLearn, s.lastLearned, s.haveLastLearn = k, est, true
	s.learnSeq++
	s.toldLearn = s.learnSeq
	return q.cappedEstimate(e, est, s.peers)
}

// lockedScan walks the dispatch list. With until set (a task at its sequence
// break), it only offers the budget to pending tasks ahead of that one in the
// FIFO. refreshed says whether the caller already refreshed the governor.
// REQUIRES: q.mu held.
func (q *Queue) lockedScan(until *entry, refreshed bool) bool {
	if q.mu.closed || q.mu.draining {
		return false
	}
	if q.mu.pendingDirty {
		q.lockedRebuild()
	}
	if q.mu.depsDirty {
		q.lockedRejectCycles()
	}
	if q.mu.mixed || (until != nil && len(q.mu.pending) > 0 && classOf(until) != q.mu.class0) {
		waiting, _ := q.lockedScanFair(until, refreshed)
		return waiting
	}
	s := scan{refreshed: refreshed}
	pw := &q.mu.parkedWait
	if pw.from != nil && pw.epoch != q.mu.epoch {
		*pw = waitRun{} // an entry changed since
	}
	list := q.mu.pending
	kept := list[:0]
	skipped, cut := false, false
	for i, e := range list {
		if e.state != statePending {
			e.inList = false
			continue
		}
		if until != nil && !less(e, until) {
			kept = append(kept, list[i:]...) // overlapping copy is a memmove
			cut = true
			break
		}
		if until == nil && q.lockedParkedFrom(e) {
			kept = append(kept, list[i:]...)
			skipped, cut = true, true
			break
		}
		stays := q.lockedTry(e, &s)
		if !stays {
			e.inList = false
			s.runFrom = nil
			continue // gone: the parked run holds without it
		}
		kept = append(kept, e)
		if pw.from != nil && !less(e, pw.from) {
			if pw.holds(q, e, &s) {
				// The run's answer again: the rest of it would get it too.
				kept = append(kept, list[i+1:]...)
				cut = true
				break
			}
			*pw = waitRun{} // e holds another verdict now
		}
		s.follow(e)
	}
	clear(list[len(kept):])
	q.mu.pending = kept
	switch {
	case until == nil && !skipped:
		q.mu.parked = parkedTail{}
		if s.blockedFrom != nil && !s.tailDeps {
			q.mu.parked = parkedTail{from: s.blockedFrom, epoch: q.mu.epoch, active: q.mu.active}
		}
	case until != nil && s.blockedFrom != nil:
		// A partial pass told some of the tail to wait, perhaps with
		// another count of tasks holding a worker: walk it again.
		q.mu.parked = parkedTail{}
	}
	if !cut {
		// A whole pass: its last run reached the end of the list.
		*pw = s.parked(q.mu.epoch)
	}
	return s.waiting
}

// parkedTail is what a pass left blocked at max-parallel: from the entry
// from on, every pending entry got its verdict (waiting for a worker, or
// paused), none of them waiting for a dependency, at the epoch epoch with
// active tasks holding a worker. Until an entry changes (the epoch moves)
// or the count does (the message would), the same verdicts hold: a pass
// blocked again at or before from leaves that tail as it is, so a flood
// of ten thousand queued tasks costs a pass what the head costs, not the
// whole list at every batch's end.
type parkedTail struct {
	from   *entry
	epoch  uint64
	active int
}

// lockedParkedFrom reports whether e, the next entry a pass would try, is
// in the parked tail and the pass is blocked at max-parallel as it was:
// the rest of the list would get the verdicts it already has.
// REQUIRES: q.mu held.
func (q *Queue) lockedParkedFrom(e *entry) bool {
	p := q.mu.parked
	return p.from != nil && q.cfg.MaxParallel > 0 && q.mu.active >= q.cfg.MaxParallel &&
		p.epoch == q.mu.epoch && p.active == q.mu.active && !less(e, p.from)
}

// lockedTry handles one pending entry; it reports whether it stays pending.
// REQUIRES: q.mu held; e.state == statePending.
func (q *Queue) lockedTry(e *entry, s *scan) bool {
	q.mu.tries++
	s.toldWait, s.toldLearn = false, -1
	if e.task.ItemsDone >= e.task.ItemsTotal {
		q.lockedEnd(e, v1alpha1.PhaseDone, v1alpha1.ReasonCompleted,
			fmt.Sprintf("all %d items done", e.task.ItemsTotal))
		return false
	}
	if s.blockedFrom != nil && len(e.task.DependsOn) > 0 {
		s.tailDeps = true
	}
	if e.task.Paused {
		q.lockedWait(e, v1alpha1.ReasonPaused, "paused before admission")
		return true
	}
	if len(e.task.DependsOn) > 0 {
		if reason, msg, ready := q.lockedDeps(e); !ready {
			q.lockedWait(e, reason, msg)
			return true
		}
	}
	if q.cfg.MaxParallel > 0 && q.mu.active >= q.cfg.MaxParallel {
		if s.maxParallelMsg == "" {
			s.maxParallelMsg = fmt.Sprintf("%d tasks hold a worker, max-parallel is %d", q.mu.active, q.cfg.MaxParallel)
		}
		if s.blockedFrom == nil {
			s.blockedFrom = e
			s.tailDeps = len(e.task.DependsOn) > 0
		}
		q.lockedWait(e, ReasonMaxParallel, s.maxParallelMsg)
		return true
	}
	if s.awaitFresh || q.lockedAwaitsFresh(e) {
		// FIFO: what follows a task waiting for a fresh snapshot is not
		// admitted on the stale one before it.
		s.awaitFresh, s.waiting = true, true
		return true
	}
	if msg := s.quota[e.task.Account]; msg != "" {
		q.lockedWait(e, ReasonQuota, msg)
		s.waiting = true
		return true
	}
	if msg := q.mu.ledger.FullAt(e.task.Account); msg != "" {
		q.lockedQuotaWait(e, s, msg)
		return true
	}
	if s.hold != nil && s.fair.holds(s.hold, e) {
		q.lockedWait(e, ReasonFairShare, s.fair.holdMessage(s.hold, e))
		s.waiting = true
		return true
	}
	if !s.refreshed {
		q.adm.Refresh()
		s.refreshed = true
	}
	est := q.lockedPassEstimate(e, s)
	if s.haveLastWait && s.lastWaitEst == est {
		q.lockedWaitDecision(e, &s.lastWait)
		s.waiting, s.toldWait = true, true
		return true
	}
	waitsFull := full(len(s.waitDecs))
	if !waitsFull {
		if i, ok := s.waits[est]; ok {
			d := s.waitDecs[i]
			s.lastWaitEst, s.lastWait, s.haveLastWait = est, d, true
			s.waitSeq++
			q.lockedWaitDecision(e, &d)
			s.waiting, s.toldWait = true, true
			return true
		}
	}
	d, r, ok := q.adm.Reserve(est)
	switch {
	case ok:
		if msg := q.mu.ledger.Over(e.task.Account, r.Contract(), true); msg != "" {
			// Granted beyond the account's quota: handed back at once,
			// the budgets are as they were.
			_ = q.adm.Release(r)
			q.lockedQuotaWait(e, s, msg)
			return true
		}
		clear(s.waits) // the budgets changed: every answer may change
		s.waitDecs = s.waitDecs[:0]
		clear(s.learned)
		s.haveLastWait, s.haveLastLearn = false, false
		q.lockedActivate(e, r, d)
		return false
	case d.Verdict == governor.Reject:
		q.lockedEnd(e, v1alpha1.PhaseRejected, string(d.Reason), DecisionMessage(d))
		return false
	default:
		if !waitsFull {
			if s.waits == nil {
				s.waits = make(map[governor.Estimate]int32, passMemoMax)
				s.waitDecs = make([]governor.Decision, 0, passMemoMax)
			}
			s.waits[est] = int32(len(s.waitDecs))
			s.waitDecs = append(s.waitDecs, d)
		}
		s.lastWaitEst, s.lastWait, s.haveLastWait = est, d, true
		s.waitSeq++
		q.lockedWaitDecision(e, &d)
		s.waiting, s.toldWait = true, true
		return true
	}
}

// lockedQuotaWait tells e to wait for its account's quota, and the
// account's later entries of the pass with it. REQUIRES: q.mu held.
func (q *Queue) lockedQuotaWait(e *entry, s *scan, msg string) {
	if s.quota == nil {
		s.quota = map[string]string{}
	}
	s.quota[e.task.Account] = msg
	q.lockedWait(e, ReasonQuota, msg)
	s.waiting = true
}

// lockedActivate hands an admitted entry to a new worker: phase Reserved.
// REQUIRES: q.mu held.
func (q *Queue) lockedActivate(e *entry, r Reservation, d governor.Decision) {
	e.state = stateActive
	q.lockedHold(e, r)
	q.mu.active++
	q.mu.ledger.Started(e.task.Account, q.clock.Now())
	e.ctx, e.cancel = context.WithCancel(q.base)
	e.ctl = make(chan struct{}, 1)
	q.lockedSetPhase(e, v1alpha1.PhaseReserved, v1alpha1.ReasonAdmitted, admitMessage(d, *e.contract))
	q.workers.Add(1)
	q.spawn(e)
}

func admitMessage(d governor.Decision, c governor.Contract) string {
	return fmt.Sprintf("%s: %s", d.Verdict, ContractMessage(c))
}

// ContractMessage says what a contract grants, for people: the one wording
// of an admission in events, conditions and logs.
func ContractMessage(c governor.Contract) string {
	return fmt.Sprintf("batch %d of %d asked%s, %s, %s reserved",
		c.Batch, c.BatchRequested, governor.SplitNote(c), governor.Count(int64(c.Threads), "thread"), governor.FormatBytes(c.MemoryBytes))
}

// lockedEstimate is the task's estimate (the Learner's for a task not in
// strict mode) with BatchMax capped by the items
// left and by the cap a MemoryExceeded set; BatchMin never exceeds it.
// REQUIRES: q.mu held.
func (q *Queue) lockedEstimate(e *entry) governor.Estimate {
	est := e.task.Estimate
	if q.learns(e) {
		est = q.learn.Estimate(&e.task, e.kills)
	}
	return q.cappedEstimate(e, est, q.lockedPeers())
}

// peersLook bounds how many queued entries lockedPeers looks at: a
// dispatch list of ten thousand tasks waiting for their dependencies
// costs a decision no more than its head.
const peersLook = 64

// lockedPeers counts the tasks that could run a batch side by side now
// (governor.Estimate.Peers): those holding a worker, and those queued
// that are neither paused nor waiting for a dependency, among the first
// peersLook of the dispatch list; at most MaxParallel when set; 0 with
// LargestBatches. REQUIRES: q.mu held.
func (q *Queue) lockedPeers() int {
	if q.cfg.LargestBatches {
		return 0
	}
	limit := math.MaxInt
	if q.cfg.MaxParallel > 0 {
		limit = q.cfg.MaxParallel
	}
	n := q.mu.active
	for i, e := range q.mu.pending {
		if n >= limit || i >= peersLook {
			break
		}
		if e.state != statePending || e.task.Paused || e.task.ItemsDone >= e.task.ItemsTotal {
			continue
		}
		if len(e.task.DependsOn) > 0 {
			if _, _, ready := q.lockedDeps(e); !ready {
				continue
			}
		}
		n++
	}
	return max(min(n, limit), 1)
}

// cappedEstimate caps est by the items e has left (and its cap after a
// kill for memory), and tells the governor how many are left (it evens
// the batches out) and how many tasks could run beside it (peers: it
// holds a batch to its share of memory).
func (q *Queue) cappedEstimate(e *entry, est governor.Estimate, peers int) governor.Estimate {
	left := e.task.ItemsTotal - e.task.ItemsDone
	hi := left
	if e.memCap > 0 && e.memCap < hi {
		hi = e.memCap
	}
	est = est.CappedAt(hi)
	est.ItemsLeft, est.Peers = left, peers
	return est
}

// learns reports whether a kill for memory of e is handed to the Learner
// rather than halving its batch. REQUIRES: q.mu held.
func (q *Queue) learns(e *entry) bool {
	return q.learn != nil && e.task.Mode != v1alpha1.EstimateStrict
}

// lockedDeps says whether every dependency is Done; otherwise why not.
// DependencyFailed wins over DependencyMissing over WaitingForDependencies.
// REQUIRES: q.mu held.
func (q *Queue) lockedDeps(e *entry) (reason, msg string, ready bool) {
	var failed, missing, waiting []string
	for _, name := range e.task.DependsOn {
		d, ok := q.mu.tasks[name]
		switch {
		case !ok:
			missing = append(missing, name)
		case d.state == stateTerminal && d.phase == v1alpha1.PhaseDone:
		case d.state == stateTerminal:
			failed = append(failed, fmt.Sprintf("%s (%s)", name, d.phase))
		default:
			waiting = append(waiting, name)
		}
	}
	switch {
	case len(failed) > 0:
		return v1alpha1.ReasonDependencyFailed, "dependency ended unsuccessfully: " + strings.Join(failed, ", "), false
	case len(missing) > 0:
		return v1alpha1.ReasonDependencyMissing, "no such task: " + q.lockedWithSuggestions(missing), false
	case len(waiting) > 0:
		return v1alpha1.ReasonWaitingForDependencies, "waiting for " + strings.Join(waiting, ", ") + " to be Done", false
	}
	return "", "", true
}

// lockedWithSuggestions joins names, each followed by "(did you mean X?)"
// when a known task's name is a likely typo of it. It runs only for a task
// whose dependency is missing. REQUIRES: q.mu held.
func (q *Queue) lockedWithSuggestions(names []string) string {
	known := make([]string, 0, len(q.mu.tasks))
	for n := range q.mu.tasks {
		known = append(known, n)
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n
		if near, ok := v1alpha1.ClosestName(n, known); ok {
			out[i] += " (did you mean " + near + "?)"
		}
	}
	return strings.Join(out, ", ")
}

// lockedRejectCycles rejects every pending task that lies on a dependency
// cycle among pending tasks (Tarjan's strongly connected components).
// REQUIRES: q.mu held.
func (q *Queue) lockedRejectCycles() {
	q.mu.depsDirty = false
	type node struct {
		index, low int
		onStack    bool
	}
	nodes := make(map[*entry]*node)
	var stack []*entry
	var sccs [][]*entry
	next := 0
	succ := func(e *entry) []*entry {
		var out []*entry
		for _, n := range e.task.DependsOn {
			if d, ok := q.mu.tasks[n]; ok && d.state == statePending {
				out = append(out, d)
			}
		}
		return out
	}
	var visit func(e *entry) *node
	visit = func(e *entry) *node {
		n := &node{index: next, low: next, onStack: true}
		next++
		nodes[e] = n
		stack = append(stack, e)
		for _, d := range succ(e) {
			m, seen := nodes[d]
			if !seen {
				m = visit(d)
				n.low = min(n.low, m.low)
			} else if m.onStack {
				n.low = min(n.low, m.index)
			}
		}
		if n.low == n.index {
			var scc []*entry
			for {
				top := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				nodes[top].onStack = false
				scc = append(scc, top)
				if top == e {
					break
				}
			}
			if len(scc) > 1 || slices.Contains(e.task.DependsOn, e.task.Name) {
				sccs = append(sccs, scc)
			}
		}
		return n
	}
	for _, e := range q.mu.tasks {
		if e.state == statePending && len(e.task.DependsOn) > 0 {
			if _, seen := nodes[e]; !seen {
				visit(e)
			}
		}
	}
	for _, scc := range sccs {
		msg := "dependency cycle: " + cyclePath(scc, succ)
		for _, e := range scc {
			q.lockedEnd(e, v1alpha1.PhaseRejected, v1alpha1.ReasonDependencyCycle, msg)
		}
	}
}

// cyclePath names one cycle through the first (by name) task of a strongly
// connected component: "a -> b -> a".
func cyclePath(scc []*entry, succ func(*entry) []*entry) string {
	in := make(map[*entry]bool, len(scc))
	start := scc[0]
	for _, e := range scc {
		in[e] = true
		if e.task.Name < start.task.Name {
			start = e
		}
	}
	// Breadth-first from start back to start, inside the component.
	prev := map[*entry]*entry{}
	frontier := []*entry{start}
	var last *entry
	for len(frontier) > 0 && last == nil {
		var nextFrontier []*entry
		for _, e := range frontier {
			for _, d := range succ(e) {
				if !in[d] {
					continue
				}
				if d == start {
					last = e
					break
				}
				if _, seen := prev[d]; !seen {
					prev[d] = e
					nextFrontier = append(nextFrontier, d)
				}
			}
			if last != nil {
				break
			}
		}
		frontier = nextFrontier
	}
	path := []string{start.task.Name}
	for e := last; e != nil && e != start; e = prev[e] {
		path = append(path, e.task.Name)
	}
	path = append(path, start.task.Name)
	// path is start, then the cycle backwards; reverse the middle.
	slices.Reverse(path[1 : len(path)-1])
	return strings.Join(path, " -> ")
}

// DecisionMessage is the human message of a governor decision: the
// decision's own Message() when the governor provides one, otherwise the
// budget that ran short and its numbers.
func DecisionMessage(d governor.Decision) string {
	if m, ok := any(d).(interface{ Message() string }); ok {
		if s := m.Message(); s != "" {
			return s
		}
	}
	unit := func(v int64) string { return fmt.Sprint(v) }
	switch d.Budget {
	case governor.BudgetMemory, governor.BudgetGPUMemory, governor.BudgetScratch:
		unit = governor.FormatBytes
	}
	if d.Budget == governor.BudgetNone {
		return fmt.Sprintf("%s %s: batch %d, %s", d.Verdict, d.Reason, d.Batch, governor.Count(int64(d.Threads), "thread"))
	}
	return fmt.Sprintf("%s %s: %s needs %s for batch %d with %s, %s free, margin %s, %s active",
		d.Verdict, d.Reason, d.Budget, unit(d.Need), d.Batch, governor.Count(int64(d.Threads), "thread"), unit(d.Free), unit(d.Margin), governor.Count(int64(d.Reservations), "reservation"))
}
