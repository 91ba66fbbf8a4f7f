package queue

import (
	"fmt"
	"time"

	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// Eviction (issue 57): a running batch made to yield the memory it holds,
// for the machine's sake, not because of anything it did. It is not a
// failure of the task: the batch is killed, its items are not committed
// (they run again), no retry is spent, the Learner is handed the batch
// with Reason Evicted (no evidence about its memory: the history does not
// count it as a kill for memory), a strict task's batch cap is not
// halved, and the task goes back to Pending with the reason until its
// backoff has passed and the Admitter grants it again (the governor waits
// while the pressure lasts).

// killer is what a RunningBatch offers to be killed at once, with no
// grace (package reconcile's batches: the cgroup, then the group, get
// SIGKILL). One without it is cancelled (SIGTERM, the grace, SIGKILL).
type killer interface{ Kill() }

// evictNote is an eviction asked for and not yet applied.
type evictNote struct {
	batch           int64
	reason, message string
	// killed: the worker killed the batch for it (an eviction asked as
	// the batch ended on its own leaves its result as it is).
	killed bool
}

// Evict makes the running batch index of task yield: it is killed and
// the task goes back to Pending with reason (v1alpha1.ReasonEvicted for
// memory pressure; a preemption may name its own) and message, with its
// committed progress and no retry spent, and is admitted again after a
// backoff (RetryDelay of the evictions of this generation), when the
// Admitter grants it. It reports whether that batch was running (a batch
// that already ended, or another one, is left alone). Any goroutine.
func (q *Queue) Evict(task string, batch int64, reason, message string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	e, ok := q.mu.tasks[task]
	if !ok || e.removed || e.inBatch == nil || e.inBatch.Index != batch || e.evict != nil {
		return false
	}
	e.evict = &evictNote{batch: batch, reason: reason, message: message}
	poke(e)
	return true
}

// stopEvicted kills a batch that was asked to yield.
func stopEvicted(rb RunningBatch) {
	if k, ok := rb.(killer); ok {
		k.Kill()
		return
	}
	rb.Cancel()
}

// lockedEvicted ends an evicted batch b: the result is recorded with the
// eviction's reason and message whatever the kill made of it (a kernel
// kill racing the eviction included), the reservation released, and the
// task Pending until the returned backoff timer fires.
// REQUIRES: q.mu held, e.evict set.
func (q *Queue) lockedEvicted(e *entry, b Batch, res BatchResult) (outcome, clock.Timer) {
	ev := e.evict
	e.evict = nil
	e.evictions++
	res.Reason, res.Message = ev.reason, ev.message
	if q.learn != nil {
		q.learn.Observe(&e.task, b, res)
	}
	delay := q.cfg.backoff(e.evictions)
	t := q.clock.NewTimer(delay)
	bc, rc := b, res
	q.lockedEmit(e, Event{Type: EventBatchEnded, Batch: &bc, Result: &rc})
	q.lockedRelease(e)
	q.lockedSetPhase(e, v1alpha1.PhasePending, ev.reason,
		fmt.Sprintf("%s; admitted again in %v at the earliest", ev.message, delay.Round(time.Millisecond)))
	return outEvicted, t
}
