package v1alpha1

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TransitionError is SetPhase's refusal of a move AllowedTransition
// forbids.
//
// +kubebuilder:object:generate=false
type TransitionError struct {
	// From is the phase the status stays in ("" for a task never written).
	From Phase
	// To is the phase refused.
	To Phase
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("phase transition %q → %q is forbidden", e.From, e.To)
}

// SetPhase moves s to phase to. Staying in the same phase does nothing;
// a move AllowedTransition forbids leaves s unchanged and returns a
// *TransitionError naming both phases. Every writer of a phase goes
// through it.
func (s *TaskStatus) SetPhase(to Phase) error {
	if s.Phase == to {
		return nil
	}
	if !AllowedTransition(s.Phase, to) {
		return &TransitionError{From: s.Phase, To: to}
	}
	s.Phase = to
	return nil
}

// SetCondition sets the condition typ of s (meta.SetStatusCondition: its
// transition time changes only with its status) for the generation s
// observes; an empty reason is written "Unknown", since a condition's
// reason may not be empty (metav1.Condition). It reports whether anything changed.
func (s *TaskStatus) SetCondition(typ string, status metav1.ConditionStatus, reason, message string) bool {
	if reason == "" {
		reason = "Unknown"
	}
	return meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message,
		ObservedGeneration: s.ObservedGeneration,
	})
}

// SameStatus reports whether a and b are the same once serialized: their
// JSON is byte for byte equal. Times count to the second only, as the
// manifest file and the API server keep them, so a status read back
// equals the one written. A status that does not serialize is never the
// same as anything.
func SameStatus(a, b *TaskStatus) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
