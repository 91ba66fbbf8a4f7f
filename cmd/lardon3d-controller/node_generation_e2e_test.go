package main

import (
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// editSpec applies edit to the task name's spec, as kubectl edit does
// (read, change, update; again on a conflict with an agent's status write).
func (f *farm) editSpec(name string, edit func(*kubeapi.Task)) {
	f.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var task kubeapi.Task
		if err := f.env.Client.Get(f.ctx, ctrlclient.ObjectKey{Namespace: nodeNS, Name: name}, &task); err != nil {
			return err
		}
		edit(&task)
		return f.env.Client.Update(f.ctx, &task)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// TestNodeObservedGenerationIsTheTasks: on the API server a Task's
// status.observedGeneration, and each condition's, is the
// metadata.generation its status reflects — after a pause, a resume, a
// retry and an edit — while the nodes' own count of the specs it ran
// under is status.specRevision (a pause is no new spec).
func TestNodeObservedGenerationIsTheTasks(t *testing.T) {
	f := newFarm(t)
	f.start("node-a", "--memory-capacity", "64Mi")
	f.createTask("gen", 4, 1, "--hold 700ms", "")
	step := func(what string, gen, rev int64, phases ...v1alpha1.Phase) {
		t.Helper()
		f.waitFor(what, time.Minute, func(ts []kubeapi.Task) bool {
			task := ts[0]
			st := task.Status
			if task.Generation != gen || st.ObservedGeneration != gen || st.SpecRevision != rev {
				return false
			}
			ok := false
			for _, p := range phases {
				ok = ok || st.Phase == p
			}
			if !ok {
				return false
			}
			current := false
			for _, c := range st.Conditions {
				if c.ObservedGeneration > task.Generation || c.ObservedGeneration < 1 {
					t.Fatalf("%s: condition %s observed generation %d of a task at generation %d", what, c.Type, c.ObservedGeneration, task.Generation)
				}
				current = current || c.ObservedGeneration == gen
			}
			return current
		})
	}
	step("running at generation 1", 1, 1, v1alpha1.PhaseRunning)
	f.editSpec("gen", func(t *kubeapi.Task) { t.Spec.Paused = true })
	step("paused at generation 2, same spec revision", 2, 1, v1alpha1.PhasePaused)
	f.editSpec("gen", func(t *kubeapi.Task) { t.Spec.Paused = false })
	step("resumed at generation 3", 3, 1, v1alpha1.PhaseRunning, v1alpha1.PhaseDone)
	step("done at generation 3", 3, 1, v1alpha1.PhaseDone)
	f.editSpec("gen", func(t *kubeapi.Task) { t.Spec.RetryToken = "again" })
	step("retried: done at generation 4, spec revision 2", 4, 2, v1alpha1.PhaseDone)
	f.editSpec("gen", func(t *kubeapi.Task) { t.Spec.Items.Count = ptr.To[int64](2) })
	step("edited: done at generation 5, spec revision 3", 5, 3, v1alpha1.PhaseDone)
	if ts := f.tasks(); ts[0].Status.Progress.ItemsTotal != 2 {
		t.Errorf("the edit did not apply: %d items", ts[0].Status.Progress.ItemsTotal)
	}
	f.assertLogsClean()
}
