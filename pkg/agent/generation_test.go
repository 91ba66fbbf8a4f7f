package agent

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// TestGenerationsTranslateAtTheSeam: the reconciler's count goes to the
// server as specRevision, observedGeneration there being the
// metadata.generation presented with the spec the status describes, and
// comes back whole; a status of an older agent (a hash, no revision)
// keeps its count, one never written for a spec has none.
func TestGenerationsTranslateAtTheSeam(t *testing.T) {
	g := newGenerations()
	spec := v1alpha1.TaskSpec{Command: []string{"true"}}
	hash := v1alpha1.SpecHash(spec)
	g.presented(spool.Event{Task: &v1alpha1.Task{Spec: spec}}, 1)
	core := &v1alpha1.TaskStatus{ObservedGeneration: 1, SpecHash: hash}
	core.SetCondition(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, "Admitted", "")
	server := g.toServer(core)
	if server.ObservedGeneration != 1 || server.SpecRevision != 1 || server.Conditions[0].ObservedGeneration != 1 {
		t.Fatalf("generation 1: %+v", server)
	}
	// A pause: generation 3 (2 was another edit, since undone), same spec.
	spec.Paused = true
	g.presented(spool.Event{Task: &v1alpha1.Task{Spec: spec}}, 3)
	server = g.toServer(core)
	if server.ObservedGeneration != 3 || server.SpecRevision != 1 || server.Conditions[0].ObservedGeneration != 3 {
		t.Fatalf("after the pause: %+v", server)
	}
	back := g.toCore(&server)
	if !v1alpha1.SameStatus(back, core) {
		t.Fatalf("round trip: %+v, want %+v", back, core)
	}
	// Another agent's view: seeded from the server.
	other := newGenerations()
	other.seed(&server)
	if got := other.toServer(core); got.ObservedGeneration != 3 {
		t.Fatalf("seeded: %+v", got)
	}
	legacy := &kubeapi.TaskStatus{TaskStatus: v1alpha1.TaskStatus{ObservedGeneration: 4, SpecHash: hash}}
	if got := newGenerations().toCore(legacy); got.ObservedGeneration != 4 {
		t.Errorf("an older agent's count became %d", got.ObservedGeneration)
	}
	unwritten := &kubeapi.TaskStatus{TaskStatus: v1alpha1.TaskStatus{ObservedGeneration: 7, Phase: v1alpha1.PhasePending}}
	if got := newGenerations().toCore(unwritten); got.ObservedGeneration != 0 {
		t.Errorf("a status no node wrote for a spec has count %d", got.ObservedGeneration)
	}
}
