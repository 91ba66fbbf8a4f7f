package agent

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// statusAt is a status in phase p with the condition typ=status (reason,
// message) when typ is set.
func statusAt(p v1alpha1.Phase, conds ...metav1.Condition) *v1alpha1.TaskStatus {
	st := &v1alpha1.TaskStatus{Phase: p}
	for _, c := range conds {
		meta.SetStatusCondition(&st.Conditions, c)
	}
	return st
}

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// The Events a status write tells, and none for a write that tells
// nothing new (progress, the same contract).
func TestStatusEvents(t *testing.T) {
	admit := cond(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, "Admitted", "batch 4 of 4 asked, 1 thread, 211MiB reserved")
	admit2 := cond(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, "Admitted", "batch 4 of 4 asked, 1 thread, 300MiB reserved")
	complete := cond(v1alpha1.ConditionComplete, metav1.ConditionTrue, "Completed", "all 8 items done in 2 batches")
	low := cond(v1alpha1.ConditionEstimateLow, metav1.ConditionTrue, "MemoryExceeded", "batch 0 was killed for memory; retried under the measured need")
	failed := cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, "BatchFailed", "batch 1 exited 3")
	ended := metav1.NewTime(time.Unix(100, 0))
	killed := statusAt(v1alpha1.PhasePending, low)
	killed.LastBatch = &v1alpha1.BatchRecord{Index: 0, Attempt: 1, Size: 4, EndTime: &ended, Reason: v1alpha1.ReasonMemoryExceeded}
	running := statusAt(v1alpha1.PhaseRunning, admit)
	running.Progress.ItemsDone = 4
	for _, c := range []struct {
		name          string
		before, after *v1alpha1.TaskStatus
		want          []string
	}{
		{"admitted", statusAt(v1alpha1.PhaseReserved), statusAt(v1alpha1.PhaseRunning, admit), []string{EventAdmitted}},
		{"a short task admitted and done in one write", statusAt(v1alpha1.PhaseReserved), statusAt(v1alpha1.PhaseDone, admit, complete), []string{EventAdmitted, EventCompleted}},
		{"progress only", statusAt(v1alpha1.PhaseRunning, admit), running, nil},
		{"done after running", running, statusAt(v1alpha1.PhaseDone, admit, complete), []string{EventCompleted}},
		{"killed for memory, retried", statusAt(v1alpha1.PhaseRunning, admit), killed, []string{EventMemoryExceeded}},
		{"the same kill written again", killed, killed, nil},
		{"readmitted under a larger contract", killed, statusAt(v1alpha1.PhaseRunning, admit2, low), []string{EventAdmitted}},
		{"failed", statusAt(v1alpha1.PhaseRunning, admit), statusAt(v1alpha1.PhaseFailed, admit, failed), []string{EventFailed}},
		{"paused", statusAt(v1alpha1.PhaseRunning, admit), statusAt(v1alpha1.PhasePaused, admit), []string{EventPaused}},
	} {
		var got []string
		for _, e := range statusEvents(c.before, c.after) {
			got = append(got, e.reason)
			if e.message == "" {
				t.Errorf("%s: %s without a message", c.name, e.reason)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: events %v, want %v", c.name, got, c.want)
		}
	}
	if es := statusEvents(statusAt(v1alpha1.PhaseRunning, admit), killed); len(es) != 1 || es[0].message != low.Message {
		t.Errorf("a memory kill's Event: %+v, want the EstimateTooLow condition's message", es)
	}
}
