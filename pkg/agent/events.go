package agent

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// The reasons of the Events an agent records on a Task (kubectl describe
// task shows them).
const (
	EventClaimed        = "Claimed"
	EventTakenOver      = "TakenOver"
	EventReopened       = "Reopened"
	EventAdmitted       = "Admitted"
	EventMemoryExceeded = "MemoryExceeded"
	EventCompleted      = "Completed"
	EventFailed         = "Failed"
	EventRejected       = "Rejected"
	EventPaused         = "Paused"
	EventFenced         = "Fenced"
	EventSelfFenced     = "SelfFenced"
	EventReleased       = "Released"
)

// taskEvent is one Event to record on a Task.
type taskEvent struct {
	kind, reason, message string // kind: corev1.EventTypeNormal or Warning
}

// statusEvents are the Events a status write from before to after tells:
// an admission with its contract, a batch killed for memory (and how it
// is retried), and the end of the task, done, failed or rejected, or its
// pause. A write that changes none of these tells nothing.
func statusEvents(before, after *v1alpha1.TaskStatus) []taskEvent {
	var out []taskEvent
	if msg, ok := admitted(after); ok && (running(after.Phase) || after.Phase == v1alpha1.PhaseDone) {
		// A new contract, or one that starts (a short task's admission
		// and end may land in one write).
		if old, was := admitted(before); !was || old != msg || !running(before.Phase) && before.Phase != after.Phase {
			out = append(out, taskEvent{corev1.EventTypeNormal, EventAdmitted, msg})
		}
	}
	if b := after.LastBatch; b != nil && b.Reason == v1alpha1.ReasonMemoryExceeded && newBatchEnd(before.LastBatch, b) {
		msg := fmt.Sprintf("batch %d (attempt %d, %d items) was killed for memory", b.Index, max(b.Attempt, 1), b.Size)
		if c := meta.FindStatusCondition(after.Conditions, v1alpha1.ConditionEstimateLow); c != nil && c.Status == metav1.ConditionTrue {
			msg = c.Message
		}
		out = append(out, taskEvent{corev1.EventTypeWarning, EventMemoryExceeded, msg})
	}
	if after.Phase != before.Phase {
		switch after.Phase {
		case v1alpha1.PhaseDone:
			out = append(out, taskEvent{corev1.EventTypeNormal, EventCompleted, conditionMessage(after, v1alpha1.ConditionComplete, "all items done")})
		case v1alpha1.PhaseFailed:
			out = append(out, taskEvent{corev1.EventTypeWarning, EventFailed, falseMessage(after, "the task failed")})
		case v1alpha1.PhaseRejected:
			out = append(out, taskEvent{corev1.EventTypeWarning, EventRejected, falseMessage(after, "the task was rejected")})
		case v1alpha1.PhasePaused:
			out = append(out, taskEvent{corev1.EventTypeNormal, EventPaused, "paused (spec.paused): its processes are stopped, its reservation kept"})
		}
	}
	return out
}

// running reports whether a task in phase p holds a contract.
func running(p v1alpha1.Phase) bool {
	return p == v1alpha1.PhaseReserved || p == v1alpha1.PhaseRunning || p == v1alpha1.PhasePaused
}

// admitted is the message of st's Admitted condition (its contract) when
// it is True.
func admitted(st *v1alpha1.TaskStatus) (string, bool) {
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAdmitted)
	if c == nil || c.Status != metav1.ConditionTrue {
		return "", false
	}
	return c.Message, true
}

// newBatchEnd reports whether after is a batch's end that before did not
// record.
func newBatchEnd(before, after *v1alpha1.BatchRecord) bool {
	if after.EndTime == nil {
		return false
	}
	return before == nil || before.EndTime == nil || before.Index != after.Index || before.Attempt != after.Attempt || !before.EndTime.Equal(after.EndTime)
}

// conditionMessage is the message of st's condition typ, else def.
func conditionMessage(st *v1alpha1.TaskStatus, typ, def string) string {
	if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Message != "" {
		return c.Message
	}
	return def
}

// falseMessage is the message of st's first False condition, else def.
func falseMessage(st *v1alpha1.TaskStatus, def string) string {
	for _, c := range st.Conditions {
		if c.Status == metav1.ConditionFalse && c.Message != "" {
			return c.Reason + ": " + c.Message
		}
	}
	return def
}
