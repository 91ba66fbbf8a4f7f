package reconcile

import (
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// keepReofferable prepares a task a previous controller rejected for the
// machine's hardware (queue.HardwareRejection: no GPU, no scratch volume, a
// demand above capacity) so that the queue offers it again when the
// hardware changes, as it would have without the restart: the rejection's
// reason goes to the queue, and the batch runner learns the task's items.
// A task whose items no longer resolve to the count on record stays as it
// is (an edit gives it a new generation).
// REQUIRES: owner goroutine; qt is the terminal task enqueueFinished built.
func (c *Controller) keepReofferable(e *entry, qt *queue.Task) {
	st := &e.status
	if st.Phase != v1alpha1.PhaseRejected {
		return
	}
	cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete)
	if cond == nil || !queue.HardwareRejection(cond.Reason) {
		return
	}
	// Resolved on the owner goroutine: only a task rejected for the
	// hardware, at start.
	items, err := resolveItems(c.cfg.SpoolDir, e.owner, e.task.Spec)
	if err != nil || items.Len() != st.Progress.ItemsTotal {
		return
	}
	qt.TerminalReason = cond.Reason
	qt.Estimate = EstimateFor(&e.task.Spec, st.Progress.ItemsTotal)
	qt.Paused = e.task.Spec.Paused
	qt.Retries = int(e.task.Spec.Retries)
	if e.task.Spec.BatchTimeout != nil {
		qt.BatchTimeout = e.task.Spec.BatchTimeout.Duration
	}
	ri := runInfoFor(e.task, e.owner, c.cfg.SpoolDir, c.cfg.StateDir, items)
	qt.InputBytesPerItem = ri.inputPerItem
	c.batches.set(e.name, st.ObservedGeneration, ri)
	c.batches.noteCommitted(e.name, st.ObservedGeneration, st.Progress.ItemsDone)
}

// reoffered clears what a rejection wrote once the queue offers the task
// again (EventPhase Pending after Rejected): it is no longer complete.
// REQUIRES: owner goroutine.
func reoffered(st *v1alpha1.TaskStatus) {
	st.CompletionTime = nil
	meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionComplete)
}
