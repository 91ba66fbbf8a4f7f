package v1alpha1

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSetPhase walks every (from, to) pair of phases, "" and an unknown
// phase included: a move allowedMoves lists happens, staying put does
// nothing, and every other move is refused with both phases named and
// the status left as it was.
func TestSetPhase(t *testing.T) {
	all := append([]Phase{"", "Bogus"}, Phases...)
	moved, refused := 0, 0
	for _, from := range all {
		for _, to := range all {
			s := TaskStatus{Phase: from, QueueSeq: 7}
			err := s.SetPhase(to)
			switch {
			case from == to:
				if err != nil || s.Phase != from {
					t.Errorf("%q → %q: staying put gave %v, phase %q", from, to, err, s.Phase)
				}
			case allowedMoves[[2]Phase{from, to}]:
				moved++
				if err != nil || s.Phase != to {
					t.Errorf("%q → %q: allowed, got %v, phase %q", from, to, err, s.Phase)
				}
			default:
				refused++
				var te *TransitionError
				if !errors.As(err, &te) || te.From != from || te.To != to {
					t.Errorf("%q → %q: want a TransitionError naming both, got %v", from, to, err)
				} else if msg := err.Error(); !strings.Contains(msg, `"`+string(from)+`" → "`+string(to)+`"`) {
					t.Errorf("%q → %q: message %q names neither", from, to, msg)
				}
				if s.Phase != from {
					t.Errorf("%q → %q: refused, but the phase became %q", from, to, s.Phase)
				}
			}
			if s.QueueSeq != 7 {
				t.Errorf("%q → %q: SetPhase touched another field", from, to)
			}
		}
	}
	if moved != len(allowedMoves) || moved+refused != 9*9-9 {
		t.Fatalf("walked %d moves and %d refusals", moved, refused)
	}
}

func TestSetCondition(t *testing.T) {
	s := TaskStatus{ObservedGeneration: 3}
	if !s.SetCondition(ConditionAdmitted, metav1.ConditionFalse, "", "waiting") {
		t.Fatal("a new condition reported no change")
	}
	c := meta.FindStatusCondition(s.Conditions, ConditionAdmitted)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Unknown" || c.Message != "waiting" || c.ObservedGeneration != 3 || c.LastTransitionTime.IsZero() {
		t.Fatalf("condition %+v", c)
	}
	if s.SetCondition(ConditionAdmitted, metav1.ConditionFalse, "Unknown", "waiting") {
		t.Error("the same condition again reported a change")
	}
	since := metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	s.Conditions[0].LastTransitionTime = since
	if !s.SetCondition(ConditionAdmitted, metav1.ConditionFalse, ReasonPaused, "other") {
		t.Error("a new reason and message reported no change")
	}
	if c := s.Conditions[0]; c.Reason != ReasonPaused || c.Message != "other" || !c.LastTransitionTime.Equal(&since) {
		t.Errorf("same status, new reason: %+v (its transition time must stay)", c)
	}
	s.ObservedGeneration = 4
	if !s.SetCondition(ConditionAdmitted, metav1.ConditionTrue, ReasonAdmitted, "") {
		t.Error("a new status reported no change")
	}
	if c := s.Conditions[0]; c.Status != metav1.ConditionTrue || c.ObservedGeneration != 4 || c.LastTransitionTime.Equal(&since) {
		t.Errorf("new status: %+v (its generation and transition time must follow)", c)
	}
	if len(s.Conditions) != 1 {
		t.Errorf("%d conditions, want 1", len(s.Conditions))
	}
}

func TestSameStatus(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	base := func() *TaskStatus {
		return &TaskStatus{Phase: PhaseRunning, ObservedGeneration: 2, StartTime: &metav1.Time{Time: at}, Progress: Progress{ItemsDone: 1, ItemsTotal: 4}}
	}
	same, other := base(), base()
	same.StartTime = &metav1.Time{Time: at.Add(999 * time.Millisecond)}
	if !SameStatus(base(), same) {
		t.Error("statuses a fraction of a second apart differ")
	}
	other.StartTime = &metav1.Time{Time: at.Add(time.Second)}
	if SameStatus(base(), other) {
		t.Error("statuses a second apart are the same")
	}
	other = base()
	other.Progress.ItemsDone = 2
	if SameStatus(base(), other) {
		t.Error("statuses of different progress are the same")
	}
	if SameStatus(base(), nil) || !SameStatus(&TaskStatus{}, &TaskStatus{}) {
		t.Error("nil or empty statuses compared wrongly")
	}
}
