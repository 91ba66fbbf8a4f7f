package queue

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// errEmptyBatch fails a task whose contract grants no item: running it would
// never progress.
var errEmptyBatch = errors.New("contract grants an empty batch")

// outcome is what a worker does after a batch ended.
type outcome int

const (
	// outStop: the task ended (Done, Failed, Rejected); nothing is held.
	outStop outcome = iota
	// outNext: the batch was committed; sequence break, then the next batch.
	outNext
	// outRetry: the same batch again after the backoff, same reservation.
	outRetry
	// outShrink: MemoryExceeded or GPUMemoryExceeded; sequence break with
	// a halved batch cap (or the Learner's revised estimate).
	outShrink
	// outCancelled: Remove or Close; the caller releases and exits.
	outCancelled
	// outDrained: the queue drains; the task was left Pending, released.
	outDrained
	// outEvicted: the batch yielded (evict.go); the task is Pending,
	// released, until the backoff fires, then takes a sequence break.
	outEvicted
)

// work is the worker of one admitted task. It owns the task's batches from
// Reserved to a terminal phase, a cancel, or a shutdown. It holds q.mu only
// for bookkeeping, never while a batch runs.
func (q *Queue) work(e *entry) {
	defer q.workerExit(e)
	attempt, failures, unprepared := 1, 0, 0
	var backoff clock.Timer
	for {
		if backoff != nil {
			ok := q.sleep(e, backoff)
			backoff = nil
			if !ok {
				q.finishCancelled(e)
				return
			}
		}
		if !q.awaitUnpaused(e) {
			q.finishCancelled(e)
			return
		}
		if q.drained(e) {
			return
		}
		b, ok := q.beginBatch(e, attempt)
		if !ok {
			q.finishCancelled(e)
			return
		}
		if b.Size < 1 {
			q.failStart(e, b, errEmptyBatch)
			return
		}
		rb, err := q.run.Start(e.ctx, b)
		if err != nil {
			if e.ctx.Err() != nil {
				q.finishCancelled(e)
				return
			}
			if !IsTransient(err) {
				q.failStart(e, b, err)
				return
			}
			// The command never ran: no retry of the task's is spent.
			// Released meanwhile, reserved again after the backoff.
			unprepared++
			if !q.sleep(e, q.unprepared(e, b, err, unprepared)) {
				q.finishCancelled(e)
				return
			}
			if !q.nextContract(e) {
				return
			}
			continue
		}
		unprepared = 0
		q.mu.Lock()
		e.inBatch = &b
		q.mu.Unlock()
		res, cancelled := q.awaitBatch(e, rb)
		q.mu.Lock()
		e.inBatch = nil
		q.mu.Unlock()
		if cancelled {
			q.finishCancelled(e)
			return
		}
		var out outcome
		out, backoff = q.endBatch(e, b, res, &attempt, &failures)
		switch out {
		case outStop:
			return
		case outRetry:
			continue
		case outEvicted:
			ok := q.sleep(e, backoff)
			backoff = nil
			if !ok {
				q.finishCancelled(e)
				return
			}
			if !q.nextContract(e) {
				return
			}
			continue
		case outNext:
			attempt, failures = 1, 0
			// Pause between batches keeps the reservation (seed rule).
			if !q.awaitUnpaused(e) {
				q.finishCancelled(e)
				return
			}
			if q.drained(e) {
				return
			}
		case outShrink:
		}
		q.awaitFresh(e)
		if !q.nextContract(e) {
			return
		}
	}
}

// nextContract takes the sequence break as the worker does: true with a
// new reservation held; false when the worker ends (cancelled, released;
// or the task stopped).
func (q *Queue) nextContract(e *entry) bool {
	switch q.sequenceBreak(e) {
	case outCancelled:
		q.finishCancelled(e)
		return false
	case outStop, outDrained:
		return false
	}
	return true
}

// drained leaves the task at this batch boundary when the queue drains
// (Drain): it reports whether it did, the worker then exits.
func (q *Queue) drained(e *entry) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.mu.draining || e.ctx.Err() != nil {
		return false
	}
	q.lockedDrained(e)
	return true
}

// lockedDrained releases e's reservation and returns it to the pending
// tasks, Pending with ReasonDraining and its progress; it is dispatched
// again, as any pending task, once the drain ends. REQUIRES: q.mu held,
// the worker of e exiting.
func (q *Queue) lockedDrained(e *entry) {
	q.lockedRelease(e)
	e.state = statePending
	q.mu.pendingDirty = true
	q.lockedSetPhase(e, v1alpha1.PhasePending, ReasonDraining,
		fmt.Sprintf("draining: left at a batch boundary, %d of %d items committed", e.task.ItemsDone, e.task.ItemsTotal))
	e.cancel()
}

// workerExit is the worker's last step.
func (q *Queue) workerExit(e *entry) {
	q.mu.Lock()
	q.lockedRelease(e) // normally already released; never twice
	q.mu.active--
	q.mu.ledger.Ended(e.task.Account, q.clock.Now())
	q.signal()
	q.mu.Unlock()
	q.workers.Done()
}

// finishCancelled releases after a Remove or a Close. A removed task emits
// nothing; on shutdown the task is reported Pending with its progress.
func (q *Queue) finishCancelled(e *entry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lockedFinishCancelled(e)
}

// lockedFinishCancelled is finishCancelled; calling it twice is harmless.
// REQUIRES: q.mu held.
func (q *Queue) lockedFinishCancelled(e *entry) {
	q.lockedRelease(e)
	if !e.removed && e.state == stateActive {
		e.state = statePending // no dispatcher runs after Close
		q.lockedSetPhase(e, v1alpha1.PhasePending, ReasonShutdown,
			fmt.Sprintf("controller shutting down; %d of %d items committed", e.task.ItemsDone, e.task.ItemsTotal))
	}
}

// sleep waits for a backoff timer; false when cancelled.
func (q *Queue) sleep(e *entry, t clock.Timer) bool {
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-e.ctx.Done():
		return false
	}
}

const pausedBetween = "paused between batches; reservation kept"

// awaitUnpaused blocks while the task is paused, reporting Paused (the
// reservation is kept); false when cancelled.
func (q *Queue) awaitUnpaused(e *entry) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if e.ctx.Err() != nil {
			return false
		}
		if !e.task.Paused || q.mu.draining {
			return true
		}
		if e.phase != v1alpha1.PhasePaused || e.message != pausedBetween {
			q.lockedSetPhase(e, v1alpha1.PhasePaused, v1alpha1.ReasonPaused, pausedBetween)
		}
		q.mu.Unlock()
		select {
		case <-e.ctl:
		case <-e.ctx.Done():
		}
		q.mu.Lock()
	}
}

// beginBatch builds the next batch under the contract and reports it
// started; false when cancelled.
func (q *Queue) beginBatch(e *entry, attempt int) (Batch, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.ctx.Err() != nil || !e.hasRes {
		return Batch{}, false
	}
	c := *e.contract
	b := Batch{
		Task:       e.task.Name,
		Index:      e.task.BatchesDone,
		Start:      e.task.ItemsDone,
		Size:       min(c.Batch, e.task.ItemsTotal-e.task.ItemsDone),
		Total:      e.task.ItemsTotal,
		Generation: e.task.Generation,
		Attempt:    attempt,
		Contract:   c,
		Timeout:    e.task.BatchTimeout,
	}
	if b.Size < 1 {
		return b, true // the caller fails the task; nothing started
	}
	if e.phase != v1alpha1.PhaseRunning {
		q.lockedSetPhase(e, v1alpha1.PhaseRunning, v1alpha1.ReasonAdmitted, "")
	}
	bc := b
	q.lockedEmit(e, Event{Type: EventBatchStarted, Batch: &bc})
	return b, true
}

// failStart ends a task whose batch could not start.
func (q *Queue) failStart(e *entry, b Batch, err error) {
	reason := ReasonStartFailed
	var r interface{ Reason() string }
	if errors.As(err, &r) && r.Reason() != "" {
		reason = r.Reason()
	}
	now := q.clock.Now()
	res := BatchResult{ExitCode: -1, Reason: reason, Message: err.Error(), Started: now, Ended: now}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lockedRelease(e)
	bc := b
	q.lockedEmit(e, Event{Type: EventBatchEnded, Batch: &bc, Result: &res})
	q.lockedEnd(e, v1alpha1.PhaseFailed, reason, fmt.Sprintf("batch %d could not start: %v", b.Index, err))
}

// unprepared reports a batch that could not be prepared for a reason
// that may pass (the n-th in a row): the batch is ended with reason
// PrepareFailed, the reservation released, the task Pending until the
// returned backoff timer fires.
func (q *Queue) unprepared(e *entry, b Batch, err error, n int) clock.Timer {
	delay := q.cfg.backoff(n)
	now := q.clock.Now()
	res := BatchResult{ExitCode: -1, Reason: ReasonPrepareFailed, Message: err.Error(), Started: now, Ended: now}
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.clock.NewTimer(delay)
	q.lockedRelease(e)
	bc := b
	q.lockedEmit(e, Event{Type: EventBatchEnded, Batch: &bc, Result: &res})
	q.lockedSetPhase(e, v1alpha1.PhasePending, ReasonPrepareFailed,
		fmt.Sprintf("batch %d could not be prepared (%v); trying again in %v", b.Index, err, delay.Round(time.Millisecond)))
	return t
}

// awaitBatch waits for the batch, applying pause and resume; on a cancel it
// cancels the batch and waits for it. It reports whether it was cancelled.
func (q *Queue) awaitBatch(e *entry, rb RunningBatch) (BatchResult, bool) {
	done := make(chan BatchResult, 1)
	go func() { done <- rb.Wait() }()
	applied := false
	for {
		q.mu.Lock()
		cancelled := e.ctx.Err() != nil
		want := e.task.Paused
		evicted := e.evict != nil
		if evicted {
			e.evict.killed = true
		}
		q.mu.Unlock()
		if evicted && !cancelled {
			if applied {
				_ = rb.Resume() // a stopped group must run to die
			}
			stopEvicted(rb)
			return <-done, false
		}
		if cancelled {
			if applied {
				// Let a stopped group see its SIGTERM.
				_ = rb.Resume()
			}
			rb.Cancel()
			return <-done, true
		}
		if want != applied {
			var err error
			if want {
				err = rb.Pause()
			} else {
				err = rb.Resume()
			}
			applied = want
			q.mu.Lock()
			msg := "batch resumed"
			phase := v1alpha1.PhaseRunning
			if want {
				msg, phase = "batch stopped; reservation kept", v1alpha1.PhasePaused
			}
			if err != nil {
				msg = fmt.Sprintf("%s (signal: %v)", msg, err)
			}
			reason := v1alpha1.ReasonPaused
			if !want {
				reason = v1alpha1.ReasonAdmitted
			}
			q.lockedSetPhase(e, phase, reason, msg)
			q.mu.Unlock()
		}
		select {
		case res := <-done:
			// A batch that ended while stopped leaves the task Paused: the
			// pause then holds between batches, with the reservation.
			return res, false
		case <-e.ctl:
		case <-e.ctx.Done():
		}
	}
}

// endBatch records the batch and decides what follows. For a retry it
// returns the backoff timer, created before the event that announces it.
func (q *Queue) endBatch(e *entry, b Batch, res BatchResult, attempt, failures *int) (outcome, clock.Timer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.evict != nil && e.evict.killed {
		return q.lockedEvicted(e, b, res)
	}
	e.evict = nil // the batch ended before it could be made to yield
	if q.learn != nil {
		q.learn.Observe(&e.task, b, res)
	}
	bc, rc := b, res
	ended := Event{Type: EventBatchEnded, Batch: &bc, Result: &rc}
	if res.ExitCode == 0 && res.Reason == "" {
		e.task.ItemsDone += b.Size
		e.task.BatchesDone++
		q.lockedEmit(e, ended)
		if e.task.ItemsDone >= e.task.ItemsTotal {
			q.lockedRelease(e)
			q.lockedEnd(e, v1alpha1.PhaseDone, v1alpha1.ReasonCompleted,
				doneMessage(e.task.ItemsTotal, e.task.BatchesDone))
			return outStop, nil
		}
		return outNext, nil
	}
	reason := res.Reason
	if reason == "" {
		reason = v1alpha1.ReasonExitCode
	}
	detail := res.Message
	if detail == "" {
		detail = fmt.Sprintf("exit code %d", res.ExitCode)
	}
	if exceeded(reason) && q.learns(e) {
		return q.lockedOverrun(e, b, ended, reason, detail, attempt)
	}
	if exceeded(reason) {
		floor := max(e.task.Estimate.BatchMin, 1)
		if b.Size <= floor {
			q.lockedEmit(e, ended)
			q.lockedRelease(e)
			q.lockedEnd(e, v1alpha1.PhaseFailed, reason,
				fmt.Sprintf("batch %d of %d items exceeded its %s at batch.min (%d): %s", b.Index, b.Size, whatExceeded(reason), floor, detail))
			return outStop, nil
		}
		e.memCap = max(floor, b.Size/2)
		*attempt++
		q.lockedEmit(e, ended)
		return outShrink, nil
	}
	*failures++
	if *failures > e.task.Retries {
		q.lockedEmit(e, ended)
		q.lockedRelease(e)
		q.lockedEnd(e, v1alpha1.PhaseFailed, reason,
			fmt.Sprintf("batch %d (items %d..%d) failed after %s: %s", b.Index, b.Start, b.Start+b.Size-1, governor.Count(int64(*attempt), "attempt"), detail))
		return outStop, nil
	}
	*attempt++
	t := q.clock.NewTimer(q.cfg.backoff(*failures))
	q.lockedEmit(e, ended)
	return outRetry, t
}

// maxKills bounds the batches of one generation killed for memory: each
// kill raises the need by at least a fifth, so this many cover any machine.
const maxKills = 64

// lockedOverrun handles a batch of a learning task killed for memory or
// GPU memory (reason): the Learner has observed it, and its revised
// estimate (the measured need, bumped) is asked for at the sequence break,
// the batch not halved. The task fails only when that need can never be
// granted on this machine.
// REQUIRES: q.mu held.
func (q *Queue) lockedOverrun(e *entry, b Batch, ended Event, reason, detail string, attempt *int) (outcome, clock.Timer) {
	if reason == v1alpha1.ReasonGPUMemoryExceeded {
		e.kills.GPUMemory++
	} else {
		e.kills.Memory++
	}
	*attempt++
	next := q.lockedEstimate(e)
	never := ""
	if dec, ok := q.adm.(Decider); ok {
		if d := dec.Decide(next); d.Verdict == governor.Reject && d.Reason == governor.ReasonExceedsCapacity {
			never = DecisionMessage(d)
		}
	}
	if n := e.kills.total(); never == "" && n > maxKills {
		never = governor.Count(int64(n), "batch") + " killed for memory or GPU memory"
	}
	q.lockedEmit(e, ended)
	if never != "" {
		q.lockedRelease(e)
		q.lockedEnd(e, v1alpha1.PhaseFailed, reason,
			fmt.Sprintf("batch %d of %d items exceeded its %s (%s) and its measured need cannot be granted: %s", b.Index, b.Size, whatExceeded(reason), detail, never))
		return outStop, nil
	}
	return outShrink, nil
}

// whatExceeded names what a batch killed for reason exceeded.
func whatExceeded(reason string) string {
	if reason == v1alpha1.ReasonGPUMemoryExceeded {
		return "GPU memory"
	}
	return "memory"
}

// sequenceBreak releases the reservation, refreshes the governor, offers the
// budget to the pending tasks ahead of this one, and asks for a fresh
// contract, polling every BoundaryPoll while told Wait. While it waits the
// task holds no reservation and is reported Pending. It returns outNext with
// a new reservation held, outStop when rejected, outCancelled when cancelled.
func (q *Queue) sequenceBreak(e *entry) outcome {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lockedRelease(e)
	q.adm.Refresh()
	hold, fair := q.lockedBreakScan(e)
	for first := true; ; first = false {
		if !first && fair {
			// The fair order moves as the accounts use: each poll offers
			// the budget to those ranked ahead again.
			hold, fair = q.lockedBreakScan(e)
		}
		if e.ctx.Err() != nil {
			// Leave Running now: it no longer holds a reservation.
			q.lockedFinishCancelled(e)
			return outCancelled
		}
		if q.mu.draining {
			q.lockedDrained(e)
			return outDrained
		}
		if e.task.Paused {
			// No reservation is held here: nothing to keep.
			if e.phase != v1alpha1.PhasePending {
				q.lockedSetPhase(e, v1alpha1.PhasePending, v1alpha1.ReasonPaused, "paused between batches")
			} else {
				q.lockedWait(e, v1alpha1.ReasonPaused, "paused between batches")
			}
			q.mu.Unlock()
			select {
			case <-e.ctl:
			case <-e.ctx.Done():
			}
			q.mu.Lock()
			q.adm.Refresh()
			continue
		}
		// The poll timer exists before the governor is asked, so whoever
		// sees the question can step a fake clock past it.
		t := q.clock.NewTimer(q.cfg.BoundaryPoll)
		var d governor.Decision
		var r Reservation
		ok, why, msg := false, ReasonFairShare, hold
		if hold == "" {
			// The task's next batch: its work going on, not a new
			// admission (the CPU gate and IO pressure defer new
			// admissions only).
			est := q.lockedEstimate(e)
			est.Continues = true
			d, r, ok = q.adm.Reserve(est)
			if ok {
				if msg = q.mu.ledger.Over(e.task.Account, r.Contract(), false); msg != "" {
					// Granted beyond the account's quota: handed back.
					_ = q.adm.Release(r)
					ok, why = false, ReasonQuota
				}
			}
		}
		switch {
		case msg != "":
			if e.phase != v1alpha1.PhasePending {
				q.lockedSetPhase(e, v1alpha1.PhasePending, why, msg)
			} else {
				q.lockedWait(e, why, msg)
			}
			q.mu.Unlock()
			select {
			case <-t.C():
			case <-e.ctl:
			case <-e.ctx.Done():
			}
			t.Stop()
			q.mu.Lock()
			q.adm.Refresh()
			continue
		case ok:
			t.Stop()
			q.lockedHold(e, r)
			switch e.phase {
			case v1alpha1.PhaseRunning:
				// Stays Running; EventBatchStarted reports the new contract.
			case v1alpha1.PhasePaused:
				// Resumed after a pause between batches: back to Running
				// with the new contract (Paused never goes to Reserved).
				q.lockedSetPhase(e, v1alpha1.PhaseRunning, v1alpha1.ReasonAdmitted, admitMessage(d, *e.contract))
			default:
				q.lockedSetPhase(e, v1alpha1.PhaseReserved, v1alpha1.ReasonAdmitted, admitMessage(d, *e.contract))
			}
			return outNext
		case d.Verdict == governor.Reject:
			t.Stop()
			if e.phase != v1alpha1.PhasePending {
				// Running (or Paused) → Rejected is not in the phase table:
				// at the break the task holds no reservation, it is Pending.
				q.lockedSetPhase(e, v1alpha1.PhasePending, string(d.Reason), DecisionMessage(d))
			}
			q.lockedEnd(e, v1alpha1.PhaseRejected, string(d.Reason), DecisionMessage(d))
			return outStop
		}
		if e.phase != v1alpha1.PhasePending {
			q.lockedSetPhase(e, v1alpha1.PhasePending, string(d.Reason), DecisionMessage(d))
			e.lastDec, e.hasDec = d, true
		} else {
			q.lockedWaitDecision(e, &d)
		}
		q.mu.Unlock()
		select {
		case <-t.C():
		case <-e.ctl:
		case <-e.ctx.Done():
		}
		t.Stop()
		q.mu.Lock()
		q.adm.Refresh()
	}
}

// lockedBreakScan offers the budget to the pending tasks ranked before e,
// at its sequence break: the seed's FIFO (those ahead of it) when the
// pending tasks and e are of one class, else the fair order; then hold
// says, when not empty, why e yields its next batch (a task of an account
// below its share waits for the governor ahead of it), and fair that
// the fair order was used. REQUIRES: q.mu held.
func (q *Queue) lockedBreakScan(e *entry) (hold string, fair bool) {
	if q.mu.closed || q.mu.draining {
		return "", false
	}
	if q.mu.pendingDirty {
		q.lockedRebuild()
	}
	if q.mu.mixed || (len(q.mu.pending) > 0 && classOf(e) != q.mu.class0) {
		if q.mu.depsDirty {
			q.lockedRejectCycles()
		}
		_, hold = q.lockedScanFair(e, true)
		return hold, true
	}
	q.lockedScan(e, true)
	return "", false
}

// doneMessage is the Complete condition's message of a task whose total
// items were done in batches batches.
func doneMessage(total, batches int64) string {
	if total == 1 {
		return "1 item done in " + governor.Count(batches, "batch")
	}
	return fmt.Sprintf("all %d items done in %s", total, governor.Count(batches, "batch"))
}
