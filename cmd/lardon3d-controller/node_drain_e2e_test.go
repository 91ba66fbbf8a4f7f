package main

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/agent"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// The node agent leaving a node: SIGTERM, a cordon.

// eventReasons are the reasons of the agents' Events on the task name.
func (f *farm) eventReasons(name string) []string {
	f.t.Helper()
	var evs corev1.EventList
	if err := f.env.Client.List(f.ctx, &evs, ctrlclient.InNamespace(nodeNS)); err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Task" && e.InvolvedObject.Name == name && e.Source.Component == agent.EventComponent {
			out = append(out, e.Reason)
		}
	}
	return out
}

// TestNodeSIGTERMLetsGoAtABatchBoundary: an agent told to stop (SIGTERM)
// while its batches run starts no batch more, lets each batch in flight
// run to its end, and lets each task go with its progress committed
// (claim released, Pending): another agent claims them at once, without
// waiting for the first one's 30 s Lease to expire, and no batch runs
// twice.
func TestNodeSIGTERMLetsGoAtABatchBoundary(t *testing.T) {
	f := newFarm(t)
	a := f.start("node-a", "--memory-capacity", "64Mi", "--lease-duration", "30s", "--drain-timeout", "20s")
	for i := range 2 {
		f.createTask(fmt.Sprintf("d%d", i), 4, 1, "--hold 1500ms", "")
	}
	f.waitFor("node-a running both tasks, one batch committed", time.Minute, func(ts []kubeapi.Task) bool {
		held := heldBy(ts, "node-a")
		done := int64(0)
		for _, t := range held {
			done += t.Status.Progress.ItemsDone
		}
		return len(held) == 2 && done >= 1
	})
	time.Sleep(300 * time.Millisecond) // batches in flight
	sigAt := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		f.dumpLogs()
		t.Fatal("node-a did not exit 15 s after SIGTERM")
	}
	t.Logf("node-a exited %v after SIGTERM", time.Since(sigAt).Round(time.Millisecond))
	ended := map[string]int64{} // items node-a ran to their end, by task
	for _, r := range f.runs() {
		if r.node != "node-a" {
			continue
		}
		if r.to == 0 {
			t.Errorf("node-a's batch %s@%d has no end: it was killed, not let run to its end", r.task, r.start)
		}
		if r.from > sigAt.UnixNano() {
			t.Errorf("node-a started batch %s@%d after SIGTERM", r.task, r.start)
		}
		ended[r.task]++
	}
	for _, task := range f.tasks() {
		st := task.Status
		if cl := st.Claim; cl == nil || cl.Node != "node-a" || cl.Seq != 1 || cl.ReleasedAt == nil {
			t.Errorf("%s: claim %+v, want node-a's claim 1, released", task.Name, cl)
		}
		if st.Phase != v1alpha1.PhasePending || st.Reservation != nil || st.Progress.ItemsDone != ended[nodeNS+"."+task.Name] {
			t.Errorf("%s let go: phase %s, reservation %v, %d items committed, want Pending, none, %d", task.Name, st.Phase, st.Reservation, st.Progress.ItemsDone, ended[nodeNS+"."+task.Name])
		}
		if !slices.Contains(f.eventReasons(task.Name), agent.EventReleased) {
			t.Errorf("%s: no %s Event", task.Name, agent.EventReleased)
		}
	}
	startB := time.Now()
	f.start("node-b", "--memory-capacity", "64Mi")
	ts := f.waitFor("every task Done on node-b", 25*time.Second, allDone)
	t.Logf("node-b finished them %v after its start", time.Since(startB).Round(time.Millisecond))
	for _, task := range ts {
		if cl := task.Status.Claim; cl.Node != "node-b" || cl.Seq != 2 {
			t.Errorf("%s: claim %+v, want node-b's claim 2", task.Name, cl)
		}
	}
	count := map[string]int{}
	for _, r := range f.runs() {
		count[fmt.Sprintf("%s@%d", r.task, r.start)]++
	}
	for b, c := range count {
		if c != 1 {
			t.Errorf("batch %s ran %d times", b, c)
		}
	}
	if len(count) != 8 {
		t.Errorf("%d batches ran, want 8", len(count))
	}
}

// TestNodeCordonedLetsGoAndClaimsNothing: an agent whose Node carries a
// taint it tolerates claims as usual; once the Node is cordoned, it lets
// each task go at its batch boundary (every batch in flight runs to its
// end) and claims nothing, even a new task; uncordoned, it claims them all
// again and runs them to Done.
func TestNodeCordonedLetsGoAndClaimsNothing(t *testing.T) {
	f := newFarm(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Spec: corev1.NodeSpec{
		Taints: []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}},
	}}
	if err := f.env.Client.Create(f.ctx, node); err != nil {
		t.Fatal(err)
	}
	// The API server taints a new Node not-ready until a kubelet says it
	// is (here none does, and no node lifecycle controller runs): the
	// Node is made to look Ready, its other taint kept.
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	if err := f.env.Client.Update(f.ctx, node); err != nil {
		t.Fatal(err)
	}
	setUnschedulable := func(on bool) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var n corev1.Node
			if err := f.env.Client.Get(f.ctx, ctrlclient.ObjectKey{Name: "node-a"}, &n); err != nil {
				return err
			}
			n.Spec.Unschedulable = on
			return f.env.Client.Update(f.ctx, &n)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	f.start("node-a", "--memory-capacity", "64Mi", "--tolerate-taint", "nvidia.com/gpu")
	for i := range 2 {
		f.createTask(fmt.Sprintf("c%d", i), 4, 1, "--hold 1s", "")
	}
	f.waitFor("node-a running both tasks despite the tolerated taint", time.Minute, func(ts []kubeapi.Task) bool {
		return len(heldBy(ts, "node-a")) == 2
	})
	cordonAt := time.Now()
	setUnschedulable(true)
	f.waitFor("both tasks let go", 30*time.Second, func(ts []kubeapi.Task) bool {
		for _, t := range ts {
			if cl := t.Status.Claim; cl == nil || cl.ReleasedAt == nil || t.Status.Phase != v1alpha1.PhasePending {
				return false
			}
		}
		return true
	})
	t.Logf("let go %v after the cordon", time.Since(cordonAt).Round(time.Millisecond))
	f.createTask("c2", 2, 1, "--hold 100ms", "")
	time.Sleep(3 * time.Second) // longer than the node check and several passes
	for _, task := range f.tasks() {
		if cl := task.Status.Claim; cl != nil && cl.ReleasedAt == nil {
			t.Errorf("%s claimed (%+v) while the node is cordoned", task.Name, cl)
		}
	}
	for _, r := range f.runs() {
		if r.to == 0 {
			t.Errorf("batch %s@%d has no end: the cordon killed it", r.task, r.start)
		}
	}
	setUnschedulable(false)
	ts := f.waitFor("every task Done once uncordoned", time.Minute, allDone)
	for _, task := range ts {
		want := int64(2) // claimed again after the release
		if task.Name == "c2" {
			want = 1
		}
		if cl := task.Status.Claim; cl.Node != "node-a" || cl.Seq != want || cl.ReleasedAt != nil {
			t.Errorf("%s: claim %+v, want node-a's claim %d", task.Name, cl, want)
		}
	}
	f.assertLogsClean()
}
