package kube_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// TestTakeOverFencesTheStaleHolder: node-a claims 6 tasks and commits
// progress on them; while its Lease is alive nobody may take them over;
// once it expired (fake clock), node-b and node-c race to take them over
// from the same read and each task goes to exactly one of them, with
// Seq 2, the committed progress kept and node-a's process group dropped; node-a, coming back with its old
// view, has every commit refused with ErrFenced and its progress is not
// written; the new holder's commits go through even from a stale read.
func TestTakeOverFencesTheStaleHolder(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, n = "takeover", 6
	createTasks(t, ctx, env.Client, ns, n)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lardon3d"}}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	clock := func() time.Time { return now }

	a := &kube.Claimer{Client: env.Client, Node: "node-a", Now: clock}
	if err := (&kube.Heartbeat{Client: env.Client, Namespace: "lardon3d", Node: "node-a", Duration: 10 * time.Second, Now: clock}).Beat(ctx); err != nil {
		t.Fatal(err)
	}
	// node-b and node-c watch node-a's Lease from its renewal on.
	live := &kube.Liveness{Now: clock}
	var list kubeapi.TaskList
	if err := env.Client.List(ctx, &list, ctrlclient.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	held := make([]*kubeapi.Task, n) // node-a's view, kept while it is "partitioned"
	for i := range list.Items {
		task := list.Items[i].DeepCopy()
		if out, err := a.Claim(ctx, task, contractFor("node-a")); err != nil || out != kube.Claimed {
			t.Fatalf("node-a claiming %s: %v %v", task.Name, out, err)
		}
		if err := a.Commit(ctx, task, 1, func(st *kubeapi.TaskStatus) {
			st.Phase = v1alpha1.PhaseRunning
			st.Progress = v1alpha1.Progress{ItemsDone: 2, ItemsTotal: 4, BatchesDone: 1}
			st.ProcessGroup = &v1alpha1.ProcessGroupRef{PGID: 4242, StartTicks: 99}
		}); err != nil {
			t.Fatalf("node-a committing %s: %v", task.Name, err)
		}
		held[i] = task
	}

	leaseOf := func() *coordinationv1.Lease {
		var l coordinationv1.Lease
		if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "lardon3d", Name: kube.LeaseName("node-a")}, &l); err != nil {
			t.Fatal(err)
		}
		return &l
	}
	read := func() []kubeapi.Task {
		var l kubeapi.TaskList
		if err := env.Client.List(ctx, &l, ctrlclient.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}

	// Lease alive: no takeover.
	live.Expired(leaseOf())
	now = now.Add(9 * time.Second)
	b := &kube.Claimer{Client: newClient(t, env, rest.CopyConfig(env.Config)), Node: "node-b", Now: clock, Liveness: live}
	for _, task := range read() {
		if out, err := b.TakeOver(ctx, &task, leaseOf(), contractFor("node-b")); err != nil || out != kube.NotClaimable {
			t.Fatalf("node-b took %s over from a live node: %v %v", task.Name, out, err)
		}
	}

	// Lease expired: node-b and node-c race from the same read.
	now = now.Add(time.Second)
	c := &kube.Claimer{Client: newClient(t, env, rest.CopyConfig(env.Config)), Node: "node-c", Now: clock, Liveness: live}
	snapshot, lease := read(), leaseOf()
	var (
		mu      sync.Mutex
		winners = map[string][]string{}
		wg      sync.WaitGroup
	)
	for _, cl := range []*kube.Claimer{b, c} {
		for i := range snapshot {
			wg.Add(1)
			go func() {
				defer wg.Done()
				task := snapshot[i].DeepCopy()
				out, err := cl.TakeOver(ctx, task, lease, contractFor(cl.Node))
				if err != nil {
					t.Errorf("%s taking over %s: %v", cl.Node, task.Name, err)
					return
				}
				if out == kube.Claimed {
					mu.Lock()
					winners[task.Name] = append(winners[task.Name], cl.Node)
					mu.Unlock()
				} else if out != kube.LostRace {
					t.Errorf("%s taking over %s: %v", cl.Node, task.Name, out)
				}
			}()
		}
	}
	wg.Wait()
	owner := map[string]string{}
	for _, task := range read() {
		w := winners[task.Name]
		if len(w) != 1 {
			t.Fatalf("%s taken over by %v, want exactly one node", task.Name, w)
		}
		owner[task.Name] = w[0]
		cl := task.Status.Claim
		if cl.Node != w[0] || cl.Seq != 2 {
			t.Errorf("%s: claim %+v, want %s seq 2", task.Name, cl, w[0])
		}
		if task.Status.Progress.ItemsDone != 2 || task.Status.Progress.BatchesDone != 1 {
			t.Errorf("%s: takeover lost the committed progress: %+v", task.Name, task.Status.Progress)
		}
		if task.Status.ProcessGroup != nil {
			t.Errorf("%s: the former holder's process group %+v survived the takeover", task.Name, task.Status.ProcessGroup)
		}
	}

	// node-a comes back with its old view: fenced, nothing written.
	for _, task := range held {
		err := a.Commit(ctx, task, 1, func(st *kubeapi.TaskStatus) { st.Progress.ItemsDone = 4 })
		if !errors.Is(err, kube.ErrFenced) {
			t.Errorf("stale node-a committing %s: %v, want ErrFenced", task.Name, err)
		}
	}
	for _, task := range read() {
		if task.Status.Progress.ItemsDone != 2 {
			t.Errorf("%s: the stale holder's progress was written: %+v", task.Name, task.Status.Progress)
		}
	}

	// The new holder commits from a read made before node-a's attempts and
	// a user's edit: the conflict is retried on a fresh read, still held.
	stale := read()[0]
	fresh := stale.DeepCopy()
	fresh.Spec.Retries = 5
	if err := env.Client.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	holder := b
	if owner[stale.Name] == "node-c" {
		holder = c
	}
	if err := holder.Commit(ctx, &stale, 2, func(st *kubeapi.TaskStatus) { st.Progress.ItemsDone = 4 }); err != nil {
		t.Fatalf("the holder's commit after a user's edit: %v", err)
	}
	if stale.Status.Progress.ItemsDone != 4 || stale.Spec.Retries != 5 {
		t.Errorf("after the commit: progress %+v, retries %d", stale.Status.Progress, stale.Spec.Retries)
	}
}
