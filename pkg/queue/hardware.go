package queue

import (
	"fmt"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// ReasonHardwareChanged: a task rejected for the machine's hardware is
// offered again because the governor's hardware generation changed (a GPU
// or a scratch volume appeared or grew, limits changed).
const ReasonHardwareChanged = "HardwareChanged"

// Decider is an Admitter that can also answer without reserving. When the
// Admitter is one, a task rejected for hardware is offered again only when
// the new hardware no longer rejects it, so that a change that does not
// help it leaves its status as it is.
type Decider interface {
	Decide(e governor.Estimate) governor.Decision
}

// HardwareRejection reports whether a rejection reason is about what the
// machine has (a GPU, a scratch volume, a capacity), which may change while
// the controller runs, rather than about the task itself (an invalid spec,
// a dependency cycle).
func HardwareRejection(reason string) bool {
	switch governor.Reason(reason) {
	case governor.ReasonNoGPU, governor.ReasonNoScratch, governor.ReasonExceedsCapacity:
		return true
	}
	return false
}

// Wake makes the dispatcher scan again now, without waiting for its next
// rescan: the machine freed resources (a pushed snapshot says so). It never
// blocks.
func (q *Queue) Wake() { q.signal() }

// reofferRejected runs when Admitter.Changed closed: every task the queue
// holds as Rejected for hardware (HardwareRejection; from this run, or
// handed as terminal with Task.TerminalReason) goes back to Pending, in its
// FIFO place, with EventPhase Pending, reason HardwareChanged. It then asks
// the governor again at the next scan. With a Decider, a task the governor
// still rejects stays as it is.
func (q *Queue) reofferRejected() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return
	}
	dec, _ := q.adm.(Decider)
	for name, old := range q.mu.tasks {
		if old.state != stateTerminal || old.phase != v1alpha1.PhaseRejected || old.removed {
			continue
		}
		reason := old.reason
		if reason == "" {
			reason = old.task.TerminalReason
		}
		if !HardwareRejection(reason) {
			continue
		}
		// A new entry, as for a new generation: the worker that rejected
		// the old one (at a sequence break) may still be exiting.
		e := &entry{task: old.task}
		e.task.Terminal, e.task.TerminalReason = "", ""
		if dec != nil {
			if d := dec.Decide(q.lockedEstimate(e)); d.Verdict == governor.Reject {
				continue
			}
		}
		old.removed = true
		q.mu.tasks[name] = e
		e.state = statePending
		q.mu.depsDirty = true
		q.mu.epoch++
		q.lockedSetPhase(e, v1alpha1.PhasePending, ReasonHardwareChanged,
			fmt.Sprintf("was rejected (%s); the machine's hardware changed, asking the governor again", reason))
		q.lockedEnqueue(e, e.task.Seq)
		q.signal()
	}
}
