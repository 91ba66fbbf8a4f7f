package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/share"
)

// Sentinel errors.
var (
	// ErrClosed is returned by calls made after Close, and by a second Close.
	ErrClosed = errors.New("queue: closed")
	// ErrNotFound is returned for a task name the queue does not hold.
	ErrNotFound = errors.New("queue: no such task")
	// ErrSpecPending is returned by Upsert for a task that holds a worker
	// when the new spec (another Generation) cannot be applied yet: only
	// Paused was taken. The reconciler reports it with a SpecApplied
	// condition.
	ErrSpecPending = errors.New("queue: task is running, only paused was applied")
	// ErrAlreadyRunning is returned by a second concurrent Run.
	ErrAlreadyRunning = errors.New("queue: already running")
)

// Reasons the queue itself gives, beside v1alpha1's and the governor's.
const (
	// ReasonMaxParallel: the task waits for a worker slot (--max-parallel).
	ReasonMaxParallel = "MaxParallel"
	// ReasonShutdown: the controller is closing; the batch in flight was
	// cancelled, committed progress is kept, the reservation released.
	ReasonShutdown = "Shutdown"
	// ReasonDraining: the queue drains (Drain): the task left its worker
	// at a batch boundary, holds nothing, and starts no batch until the
	// drain ends; its progress is committed.
	ReasonDraining = "Draining"
	// ReasonStartFailed: the runner could not start the batch and its error
	// named no reason of its own.
	ReasonStartFailed = "StartFailed"
	// ReasonPrepareFailed: what a batch needs before its command runs (its
	// log, items file, scratch directory, cgroup) could not be made, for
	// a reason that may pass (a full or read-only disk): the task waits,
	// Pending, and tries again with backoff, its retries untouched.
	ReasonPrepareFailed = "PrepareFailed"
)

// IsTransient reports whether a BatchRunner's Start error may pass: err
// (or an error it wraps) has a method Transient() bool that says so.
func IsTransient(err error) bool {
	var t interface{ Transient() bool }
	return errors.As(err, &t) && t.Transient()
}

// TaskState is a point-in-time view of one task, for get, describe and metrics.
type TaskState struct {
	// Name and Seq of the task.
	Name string
	Seq  int64
	// Generation of the spec the queue holds.
	Generation int64
	// Phase of the task.
	Phase v1alpha1.Phase
	// Reason and Message of the last phase change or wait.
	Reason, Message string
	// Contract held, nil when the task holds no reservation.
	Contract *governor.Contract
	// ItemsDone, ItemsTotal and BatchesDone are the committed progress.
	ItemsDone, ItemsTotal, BatchesDone int64
	// Paused as last asked.
	Paused bool
}

// state says who owns an entry.
type state int

const (
	// statePending: the dispatcher owns it (it is in mu.pending).
	statePending state = iota
	// stateActive: a worker goroutine owns it.
	stateActive
	// stateTerminal: ended (Done, Failed, Rejected); kept for dependents.
	stateTerminal
)

// entry is the queue's record of one task. Every field is guarded by
// Queue.mu, except ctx/cancel/ctl which are set before the worker starts and
// never change after.
type entry struct {
	// Hot fields first: a scan reads them for every pending task.
	state state
	phase v1alpha1.Phase
	// hasDec says lastDec holds the last governor decision reported by
	// EventWaiting, so a rescan that gets the same answer emits nothing
	// (and formats nothing).
	hasDec bool
	// inList is true while the entry sits in mu.pending (possibly stale).
	inList bool
	// removed is set by Remove: the entry is forgotten and emits nothing.
	removed bool
	// hasRes says res is held; contract is its contract (nil otherwise).
	hasRes bool
	// memCap caps BatchMax after a MemoryExceeded or GPUMemoryExceeded
	// (0: none).
	memCap int64
	// kills counts the batches killed for memory and GPU memory in this
	// generation.
	kills Kills
	// pendingSince is when the entry last became pending (aging).
	pendingSince time.Time
	// freshBy, when set, is until when the task waits for a snapshot
	// numbered above freshAfter (SnapshotCounter).
	freshAfter uint64
	freshBy    time.Time
	task       Task
	lastDec    governor.Decision

	reason, message string
	contract        *governor.Contract
	res             Reservation

	ctx    context.Context
	cancel context.CancelFunc
	// ctl wakes the worker (pause, resume, cancel); buffered(1).
	ctl chan struct{}
	// inBatch is the batch running now (nil between batches); evict an
	// eviction asked for it (evict.go); evictions counts those of this
	// generation (the backoff).
	inBatch   *Batch
	evict     *evictNote
	evictions int
}

// Queue orders tasks, asks the governor for each, and runs the admitted ones
// batch by batch under their contracts. See the package documentation.
type Queue struct {
	cfg   Config
	adm   Admitter
	run   BatchRunner
	obs   Observer
	clock clock.WithTicker

	// wake is the dispatcher's signal: buffered(1), sends never block.
	wake chan struct{}
	// closing is closed by Close.
	closing chan struct{}
	// base is the parent context of every worker; Close cancels it.
	base       context.Context
	cancelBase context.CancelFunc

	running atomic.Bool
	// workers counts live worker goroutines; runs counts live Run loops.
	workers, runs sync.WaitGroup

	// learn revises the estimates of learning tasks (nil: none do).
	learn Learner

	// spawn starts the worker of an entry that became active. Tests and
	// benchmarks replace it.
	spawn func(e *entry)

	mu struct {
		sync.Mutex
		// tasks by name.
		tasks map[string]*entry
		// pending is the dispatch list in (Seq, Name) order; it may hold
		// entries no longer pending (dropped at the next scan).
		pending []*entry
		// pendingDirty: pending must be rebuilt from tasks and sorted.
		pendingDirty bool
		// depsDirty: dependencies changed; look for cycles at the next scan.
		depsDirty bool
		// active counts entries owned by a worker.
		active int
		// epoch counts the changes to the pending entries themselves (a
		// task replaced, added, removed, paused or resumed, re-offered):
		// a pass blocked at max-parallel may then skip the tail a pass at
		// the same epoch gave its verdicts (parked).
		epoch  uint64
		parked parkedTail
		// parkedWait is the run a whole pass ended with: the tail it
		// told to wait with one answer of the governor (waitRun).
		parkedWait waitRun
		// tries counts the entries passes looked at (for the tests).
		tries  int
		closed bool
		// draining: no task is dispatched, and each worker leaves its
		// task at its next batch boundary (Drain).
		draining bool
		// history is a ring of the last terminal events.
		history     []Event
		historyNext int
		// ledger books each account's reservations, usage and quotas.
		ledger *share.Ledger
		// mixed says the pending entries may span more than one
		// (account, priority) class: a pass then walks them in the fair
		// order (fair.go); class0 is the class of the list's first.
		mixed  bool
		class0 class
	}
}

// New builds a queue. obs may be nil. Call Run to start dispatching.
func New(cfg Config, adm Admitter, run BatchRunner, obs Observer, opts ...Option) *Queue {
	q := &Queue{
		cfg:     cfg.withDefaults(),
		adm:     adm,
		run:     run,
		obs:     obs,
		clock:   clock.RealClock{},
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
	}
	for _, o := range opts {
		o(q)
	}
	q.base, q.cancelBase = context.WithCancel(context.Background())
	q.spawn = func(e *entry) { go q.work(e) }
	q.mu.tasks = make(map[string]*entry)
	q.mu.history = make([]Event, 0, q.cfg.HistorySize)
	q.mu.ledger = share.New(q.cfg.Fair)
	return q
}

// signal wakes the dispatcher without blocking.
func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// poke wakes an entry's worker without blocking.
func poke(e *entry) {
	if e.ctl == nil {
		return
	}
	select {
	case e.ctl <- struct{}{}:
	default:
	}
}

// less orders entries: Seq, then Name.
func less(a, b *entry) bool {
	if a.task.Seq != b.task.Seq {
		return a.task.Seq < b.task.Seq
	}
	return a.task.Name < b.task.Name
}

// Upsert is Replace for callers that need only the error.
func (q *Queue) Upsert(t Task) error {
	_, err := q.Replace(t)
	return err
}

// Replace adds a task or replaces the one of the same name, and reports
// what it replaced. A generation is taken whole or not at all:
//
//   - A new name is added: Pending, or terminal when t.Terminal is set.
//   - A pending task is replaced wholesale (its FIFO place follows t.Seq).
//   - A task the queue ended (or was handed as terminal) with the same
//     Generation only takes Paused; another Generation replaces it.
//   - A task that holds a worker (Reserved, Running, Paused, or between two
//     batches) only takes Paused; if t.Generation differs, ErrSpecPending
//     and nothing else of t is applied, unless t.Restart: then the
//     generation in flight is cancelled (as by Remove) and t replaces it.
//
// With t.CarryProgress, the new generation continues from the committed
// progress of the replaced one unless it ended Done. After Close it
// returns ErrClosed.
func (q *Queue) Replace(t Task) (Replaced, error) {
	if t.Name == "" {
		return Replaced{}, errors.New("queue: upsert: empty task name")
	}
	t.DependsOn = slices.Clone(t.DependsOn)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return Replaced{}, ErrClosed
	}
	defer q.signal()
	var rep Replaced
	e, ok := q.mu.tasks[t.Name]
	if ok {
		rep = Replaced{Existed: true, Generation: e.task.Generation, Phase: e.phase}
		switch e.state {
		case stateActive:
			q.lockedSetPaused(e, t.Paused)
			if t.Generation == e.task.Generation {
				rep.ItemsDone, rep.BatchesDone = e.task.ItemsDone, e.task.BatchesDone
				return rep, nil
			}
			if !t.Restart {
				return rep, fmt.Errorf("upsert %s generation %d: %w", t.Name, t.Generation, ErrSpecPending)
			}
			// Cancelled as Remove does; its worker, still exiting, keeps
			// the old entry and never touches the new one.
			old := e
			old.removed = true
			old.cancel()
			poke(old)
			old.state = stateTerminal
			e = &entry{task: old.task}
			q.mu.tasks[t.Name] = e
			ok = false
		case stateTerminal:
			if t.Generation == e.task.Generation {
				e.task.Paused = t.Paused
				rep.ItemsDone, rep.BatchesDone = e.task.ItemsDone, e.task.BatchesDone
				return rep, nil
			}
			// A new generation gets a new entry: the worker that ended the
			// old one may still be exiting and must never touch it.
			old := e
			old.removed = true
			e = &entry{task: old.task}
			q.mu.tasks[t.Name] = e
			ok = false
		}
		if t.CarryProgress {
			if rep.Phase == v1alpha1.PhaseDone {
				t.ItemsDone, t.BatchesDone = 0, 0
			} else {
				t.ItemsDone, t.BatchesDone = e.task.ItemsDone, e.task.BatchesDone
			}
		}
	} else {
		e = &entry{}
		q.mu.tasks[t.Name] = e
	}
	t.CarryProgress, t.Restart = false, false
	rep.ItemsDone, rep.BatchesDone = t.ItemsDone, t.BatchesDone
	// A pending task upserted again with its generation keeps its waiting
	// state, so a relist does not re-emit every EventWaiting.
	same := ok && e.state == statePending && t.Generation == e.task.Generation && t.Terminal == ""
	oldSeq := e.task.Seq
	e.task = t
	q.mu.depsDirty = true
	q.mu.epoch++
	if !same {
		e.memCap, e.kills = 0, Kills{}
		e.hasDec = false
		e.reason, e.message = "", ""
	}
	if t.Terminal != "" {
		e.state = stateTerminal
		e.phase = t.Terminal
		return rep, nil
	}
	e.state = statePending
	e.phase = v1alpha1.PhasePending
	if !same {
		e.pendingSince = q.clock.Now()
	}
	if !same && !t.Paused {
		q.lockedMarkFresh(e)
	}
	q.lockedEnqueue(e, oldSeq)
	return rep, nil
}

// Busy reports whether a task is pending (waiting for admission, a
// dependency or a worker, or paused before admission) or holds a worker.
// It may go on saying so until the next scan drops what left the dispatch
// list, never the other way round.
func (q *Queue) Busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.active > 0 || len(q.mu.pending) > 0 || q.mu.pendingDirty
}

// Drain, on, stops the queue from starting batches: no task is
// dispatched, and each worker, at its next batch boundary (the batch in
// flight ended and its progress committed, or before its first batch, or
// while it waits for a new contract), releases its reservation and leaves
// its task Pending, reason ReasonDraining. The batches in flight run to
// their end; one stopped by a pause stays stopped. Drain(false) dispatches
// again. Working reports when the drain is complete.
func (q *Queue) Drain(on bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.draining == on {
		return
	}
	q.mu.draining = on
	q.mu.epoch++
	for _, e := range q.mu.tasks {
		if e.state == stateActive {
			poke(e)
		}
	}
	q.signal()
}

// Working reports how many tasks hold a worker (Reserved, Running, Paused,
// or between two batches).
func (q *Queue) Working() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.active
}

// Holds reports whether a worker owns the task (Reserved, Running, Paused,
// or between two batches): a new generation would be refused with
// ErrSpecPending.
func (q *Queue) Holds(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.mu.tasks[name]
	return ok && e.state == stateActive
}

// lockedEnqueue puts a pending entry in the dispatch list.
// REQUIRES: q.mu held; e.state == statePending.
func (q *Queue) lockedEnqueue(e *entry, oldSeq int64) {
	q.mu.epoch++
	q.lockedNoteClass(e)
	if e.inList {
		if oldSeq != e.task.Seq {
			q.mu.pendingDirty = true
		}
		return
	}
	n := len(q.mu.pending)
	if !q.mu.pendingDirty && (n == 0 || less(q.mu.pending[n-1], e)) {
		q.mu.pending = append(q.mu.pending, e)
		e.inList = true
		return
	}
	q.mu.pendingDirty = true
}

// lockedRebuild rebuilds the dispatch list from the task map.
// REQUIRES: q.mu held.
func (q *Queue) lockedRebuild() {
	for _, e := range q.mu.pending {
		e.inList = false
	}
	old := q.mu.pending
	list := old[:0]
	for _, e := range q.mu.tasks {
		if e.state == statePending {
			e.inList = true
			list = append(list, e)
		}
	}
	if len(list) < len(old) { // same backing array: drop stale pointers
		clear(old[len(list):])
	}
	slices.SortFunc(list, func(a, b *entry) int {
		return cmp.Or(cmp.Compare(a.task.Seq, b.task.Seq), cmp.Compare(a.task.Name, b.task.Name))
	})
	q.mu.pending = list
	q.mu.pendingDirty = false
	q.lockedReclass()
}

// SetPaused pauses or resumes a task. A pending task is not dispatched while
// paused; a task holding a worker keeps its reservation while paused.
func (q *Queue) SetPaused(name string, paused bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return ErrClosed
	}
	e, ok := q.mu.tasks[name]
	if !ok {
		return fmt.Errorf("set paused %s: %w", name, ErrNotFound)
	}
	q.lockedSetPaused(e, paused)
	q.signal()
	return nil
}

// lockedSetPaused records the wish and wakes the worker, if any.
// REQUIRES: q.mu held.
func (q *Queue) lockedSetPaused(e *entry, paused bool) {
	if e.task.Paused == paused {
		return
	}
	e.task.Paused = paused
	q.mu.epoch++
	if !paused && e.state == statePending {
		q.lockedMarkFresh(e)
	}
	poke(e)
}

// Remove forgets a task. A task holding a worker is cancelled: its batch is
// cancelled and waited for, and its reservation released exactly once, in
// the background (Close waits for it). A removed task emits no more events.
func (q *Queue) Remove(name string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.mu.tasks[name]
	if !ok {
		return fmt.Errorf("remove %s: %w", name, ErrNotFound)
	}
	delete(q.mu.tasks, name)
	e.removed = true
	q.mu.depsDirty = true
	q.mu.epoch++
	if e.state == stateActive {
		e.cancel()
		poke(e)
	}
	e.state = stateTerminal // whatever it was, the dispatcher drops it
	q.signal()
	return nil
}

// Run dispatches until ctx ends (it returns ctx.Err()) or Close (it returns
// nil). Ending Run's context stops dispatching only: Close is what cancels
// the workers. Run may be called once.
func (q *Queue) Run(ctx context.Context) error {
	if !q.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	q.mu.Lock()
	if q.mu.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.runs.Add(1)
	q.mu.Unlock()
	defer q.runs.Done()

	// changed is renewed only once it has fired (and before acting on it),
	// so a generation change made while the loop is anywhere else is
	// still seen.
	changed := q.adm.Changed()
	for {
		// The timer exists before the scan, so whoever sees the scan's
		// effects can step a fake clock past it.
		t := q.clock.NewTimer(q.cfg.RescanWait)
		var timeout <-chan time.Time
		if q.scanOnce() {
			timeout = t.C()
		} else {
			t.Stop()
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-q.closing:
			t.Stop()
			return nil
		case <-q.wake:
		case <-changed:
			changed = q.adm.Changed()
			q.reofferRejected()
		case <-timeout:
		}
		t.Stop()
	}
}

// Close stops ingress and dispatching, cancels every batch in flight (its
// committed progress is kept; the task is reported Pending with reason
// Shutdown), waits until every worker has released its reservation exactly
// once and Run has returned, or until ctx ends (ctx.Err()). The first Close
// does all of this; later ones return ErrClosed.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	if q.mu.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.mu.closed = true
	close(q.closing)
	q.cancelBase()
	for _, e := range q.mu.tasks {
		if e.state == stateActive {
			poke(e)
		}
	}
	q.mu.Unlock()

	done := make(chan struct{})
	go func() {
		q.workers.Wait()
		q.runs.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close: %w", ctx.Err())
	}
}

// Snapshot returns every task's state in FIFO order.
func (q *Queue) Snapshot() []TaskState {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]TaskState, 0, len(q.mu.tasks))
	for _, e := range q.mu.tasks {
		s := TaskState{
			Name:        e.task.Name,
			Seq:         e.task.Seq,
			Generation:  e.task.Generation,
			Phase:       e.phase,
			Reason:      e.reason,
			Message:     e.message,
			ItemsDone:   e.task.ItemsDone,
			ItemsTotal:  e.task.ItemsTotal,
			BatchesDone: e.task.BatchesDone,
			Paused:      e.task.Paused,
		}
		if e.contract != nil {
			c := *e.contract
			s.Contract = &c
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b TaskState) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// History returns the last terminal events (Done, Failed, Rejected), oldest
// first, at most Config.HistorySize of them.
func (q *Queue) History() []Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := q.mu.history
	if len(h) < q.cfg.HistorySize {
		return slices.Clone(h)
	}
	out := make([]Event, 0, len(h))
	out = append(out, h[q.mu.historyNext:]...)
	return append(out, h[:q.mu.historyNext]...)
}

// lockedEmit fills an event from the entry and hands it to the observer.
// Events are emitted under q.mu, which keeps them in order per task.
// REQUIRES: q.mu held.
func (q *Queue) lockedEmit(e *entry, ev Event) {
	if e.removed {
		return
	}
	ev.Task = e.task.Name
	ev.Generation = e.task.Generation
	if ev.Phase == "" {
		ev.Phase = e.phase
	}
	if ev.Contract == nil && e.contract != nil {
		c := *e.contract
		ev.Contract = &c
	}
	ev.ItemsDone, ev.BatchesDone = e.task.ItemsDone, e.task.BatchesDone
	ev.Time = q.clock.Now()
	if ev.Type == EventPhase && v1alpha1.IsTerminal(ev.Phase) {
		if len(q.mu.history) < q.cfg.HistorySize {
			q.mu.history = append(q.mu.history, ev)
		} else {
			q.mu.history[q.mu.historyNext] = ev
			q.mu.historyNext = (q.mu.historyNext + 1) % q.cfg.HistorySize
		}
	}
	if q.obs != nil {
		q.obs.Observe(ev)
	}
}

// lockedSetPhase moves the entry to a phase and emits EventPhase.
// REQUIRES: q.mu held.
func (q *Queue) lockedSetPhase(e *entry, p v1alpha1.Phase, reason, msg string) {
	e.phase, e.reason, e.message = p, reason, msg
	e.hasDec = false
	q.lockedEmit(e, Event{Type: EventPhase, Reason: reason, Message: msg})
}

// lockedEnd moves the entry to a terminal phase; it must hold no reservation.
// REQUIRES: q.mu held.
func (q *Queue) lockedEnd(e *entry, p v1alpha1.Phase, reason, msg string) {
	e.state = stateTerminal
	q.lockedSetPhase(e, p, reason, msg)
	q.signal() // dependents may move
}

// lockedWait reports why a task stays Pending; it emits only on change.
// REQUIRES: q.mu held.
func (q *Queue) lockedWait(e *entry, reason, msg string) {
	e.hasDec = false
	if e.phase == v1alpha1.PhasePending && e.reason == reason && e.message == msg {
		return
	}
	e.phase, e.reason, e.message = v1alpha1.PhasePending, reason, msg
	q.lockedEmit(e, Event{Type: EventWaiting, Reason: reason, Message: msg})
}

// lockedWaitDecision reports a governor Wait; the same decision as last time
// emits nothing and formats nothing.
// REQUIRES: q.mu held.
func (q *Queue) lockedWaitDecision(e *entry, d *governor.Decision) {
	if e.hasDec && e.phase == v1alpha1.PhasePending && e.lastDec == *d {
		return
	}
	q.lockedWait(e, string(d.Reason), DecisionMessage(*d))
	e.lastDec, e.hasDec = *d, true
}

// lockedRelease releases the entry's reservation if it holds one; it is the
// only place the queue releases, and hasRes makes it exactly once.
// REQUIRES: q.mu held.
func (q *Queue) lockedRelease(e *entry) {
	if !e.hasRes {
		return
	}
	e.hasRes = false
	if e.contract != nil {
		q.mu.ledger.Release(e.task.Account, *e.contract, q.clock.Now())
	}
	e.contract = nil
	// A refused release (already released) changes nothing in the governor;
	// the queue never releases twice, so there is nothing to undo.
	_ = q.adm.Release(e.res)
	e.res = nil
	q.signal()
}

// lockedHold installs a granted reservation on the entry.
// REQUIRES: q.mu held; !e.hasRes.
func (q *Queue) lockedHold(e *entry, r Reservation) {
	c := r.Contract()
	e.res, e.hasRes, e.contract = r, true, &c
	q.mu.ledger.Hold(e.task.Account, c, q.clock.Now())
}

// Held is one task's contract in force (Queue.Held).
type Held struct {
	Name     string
	Contract governor.Contract
}

// Held returns every contract in force, in no order: what the governor's
// reservations are, task by task. It copies nothing else, for a caller
// that samples it often.
func (q *Queue) Held() []Held {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Held
	for _, e := range q.mu.tasks {
		if e.hasRes && e.contract != nil {
			out = append(out, Held{Name: e.task.Name, Contract: *e.contract})
		}
	}
	return out
}
