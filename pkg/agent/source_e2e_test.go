package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/kube"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

const gi = int64(1) << 30

func newSource(t *testing.T, env *kubetest.Env, node string, memCap int64) *Source {
	t.Helper()
	gov := governor.New(governor.Config{MemoryCapacity: memCap, MemoryReserved: -1})
	t.Cleanup(func() { _ = gov.Close() })
	gov.Update(governor.Snapshot{Taken: time.Now(), MemTotal: 8 * gi, MemAvailable: 8 * gi, CPUs: 2})
	s, err := New(Config{
		Rest: env.Config, Scheme: env.Scheme, Client: env.Client, Node: node,
		LeaseNamespace: "lardon3d", LeaseDuration: 10 * time.Second,
		Governor: gov, DataDir: t.TempDir(), Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pending(s *Source) []spool.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]spool.Event(nil), s.mu.pending...)
}

// startEnv starts an API server with the namespaces the tests use: the
// Leases' and the tasks'. The context ends with the test, within a minute.
func startEnv(t *testing.T) (*kubetest.Env, context.Context) {
	t.Helper()
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	for _, ns := range []string{"lardon3d", "work"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	return env, ctx
}

func createTask(t *testing.T, ctx context.Context, c ctrlclient.Client, name, mem string, deps ...string) {
	t.Helper()
	q := resource.MustParse(mem)
	task := &kubeapi.Task{
		ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: name},
		Spec: v1alpha1.TaskSpec{
			Command:   []string{"true"},
			Items:     v1alpha1.Items{Count: ptr.To[int64](2)},
			DependsOn: deps,
			Resources: v1alpha1.Resources{Fixed: v1alpha1.Cost{Memory: &q}},
		},
	}
	if err := c.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
}

// TestSourceClaimsPresentsAndFences drives one pass of two sources against
// a real API server (the direct client as the reader, so what a pass sees
// is what the server holds):
//   - a pass claims what the governor's dry run admits, one task per pass
//     until the local queue admitted it, and presents it (Added, named
//     NAMESPACE.NAME, dependsOn cleared) with its status before the claim;
//   - a task whose dependency is not Done is not claimed;
//   - a task too big for this node's governor is not claimed;
//   - a second node's pass does not claim what the first holds;
//   - once another claim holds the task, the holder's status write gets a
//     conflict (409), then ErrFenced: nothing is written, the reconciler
//     is told the task is gone (Deleted), and every later write is refused
//     without reaching the server.
func TestSourceClaimsPresentsAndFences(t *testing.T) {
	env, ctx := startEnv(t)
	createTask(t, ctx, env.Client, "a", "64Mi")
	createTask(t, ctx, env.Client, "b", "64Mi", "a")
	createTask(t, ctx, env.Client, "big", "4Gi")
	createTask(t, ctx, env.Client, "c", "64Mi")

	s := newSource(t, env, "node-a", gi)
	if err := s.beat.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.pass(ctx, env.Client); err != nil {
		t.Fatal(err)
	}
	evs := pending(s)
	if len(evs) != 1 || evs[0].Type != spool.Added || evs[0].Path != "work/a" || evs[0].Task == nil || evs[0].Err != nil {
		t.Fatalf("first pass presented %+v, want work/a Added", evs)
	}
	if got := evs[0].Task.Metadata.Name; got != "work.a" {
		t.Errorf("core name %q, want work.a", got)
	}
	if evs[0].Task.Status.Phase != "" || evs[0].Task.Status.Reservation != nil {
		t.Errorf("presented status %+v, want the status before the claim", evs[0].Task.Status)
	}
	// The local queue has not admitted a yet: no further claim.
	if err := s.pass(ctx, env.Client); err != nil {
		t.Fatal(err)
	}
	if n := len(pending(s)); n != 1 {
		t.Fatalf("%d events after a second pass, want 1 (one claim at a time)", n)
	}
	// The reconciler writes Reserved (admitted): the next claim may go.
	st := &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseReserved, Progress: v1alpha1.Progress{ItemsTotal: 2}}
	if err := s.WriteStatus("work/a", st); err != nil {
		t.Fatal(err)
	}
	if err := s.pass(ctx, env.Client); err != nil {
		t.Fatal(err)
	}
	evs = pending(s)
	if len(evs) != 2 || evs[1].Path != "work/c" {
		t.Fatalf("after a was admitted the pass presented %+v, want work/c (b waits for a, big fits no node)", evs[1:])
	}
	var big kubeapi.Task
	if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "work", Name: "big"}, &big); err != nil {
		t.Fatal(err)
	}
	if big.Status.Claim != nil {
		t.Errorf("big claimed by %+v", big.Status.Claim)
	}
	var b kubeapi.Task
	if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "work", Name: "b"}, &b); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionDependenciesReady); b.Status.Claim != nil || c == nil || c.Reason != v1alpha1.ReasonWaitingForDependencies || c.Message != "waiting for a to be Done" {
		t.Errorf("b: claim %+v, condition %+v; want unclaimed, waiting for a", b.Status.Claim, c)
	}

	// Another node sees a held: it does not claim it.
	other := newSource(t, env, "node-b", gi)
	if err := other.beat.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.pass(ctx, env.Client); err != nil {
		t.Fatal(err)
	}
	for _, ev := range pending(other) {
		if ev.Path == "work/a" || ev.Path == "work/c" {
			t.Errorf("node-b presented %s, held by node-a", ev.Path)
		}
	}

	// node-b takes a over (as after node-a's Lease expired): node-a's next
	// write conflicts, then is fenced.
	var a kubeapi.Task
	if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "work", Name: "a"}, &a); err != nil {
		t.Fatal(err)
	}
	if out, err := other.claimer.TakeOver(ctx, &a, nil, v1alpha1.Contract{GrantedAt: metav1.Now()}); err != nil || out != kube.Claimed {
		t.Fatalf("node-b taking a over: %v %v", out, err)
	}
	rv := a.ResourceVersion
	err := s.WriteStatus("work/a", &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, Progress: v1alpha1.Progress{ItemsDone: 1, ItemsTotal: 2}})
	if !errors.Is(err, kube.ErrFenced) {
		t.Fatalf("node-a's write after the takeover: %v, want ErrFenced", err)
	}
	if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "work", Name: "a"}, &a); err != nil {
		t.Fatal(err)
	}
	if a.ResourceVersion != rv || a.Status.Claim.Node != "node-b" || a.Status.Progress.ItemsDone != 0 {
		t.Errorf("after node-a was fenced the task is at %s (was %s), claim %+v, progress %+v: node-a wrote", a.ResourceVersion, rv, a.Status.Claim, a.Status.Progress)
	}
	evs = pending(s)
	if last := evs[len(evs)-1]; last.Type != spool.Deleted || last.Path != "work/a" {
		t.Errorf("node-a's last event %+v, want work/a Deleted (the reconciler kills its batches)", last)
	}
	if err := s.WriteStatus("work/a", st); !errors.Is(err, kube.ErrFenced) {
		t.Errorf("a later write: %v, want ErrFenced", err)
	}
	// The fenced node's next pass does not present a again.
	n := len(pending(s))
	if err := s.pass(ctx, env.Client); err != nil {
		t.Fatal(err)
	}
	for _, ev := range pending(s)[n:] {
		if ev.Path == "work/a" {
			t.Errorf("node-a presented a again: %+v", ev)
		}
	}
}

// laggingLeases is a reader whose Leases are behind the server's: it lists
// none, as a cache whose Lease watch has not caught up with its Task watch
// (or an agent just continued after a stop, whose cache has not heard of
// the Leases created meanwhile).
type laggingLeases struct{ ctrlclient.Reader }

func (r laggingLeases) List(ctx context.Context, list ctrlclient.ObjectList, opts ...ctrlclient.ListOption) error {
	if _, ok := list.(*coordinationv1.LeaseList); ok {
		return nil
	}
	return r.Reader.List(ctx, list, opts...)
}

// TestSourceTakesOverOnlyOnAFreshLease: a pass whose cache has not seen
// the holder's Lease does not take the task over while the holder's Lease
// is alive on the server; once the holder is gone from the server (its
// Lease deleted), the same lagging pass takes it over, under the next
// claim.
func TestSourceTakesOverOnlyOnAFreshLease(t *testing.T) {
	env, ctx := startEnv(t)
	createTask(t, ctx, env.Client, "a", "64Mi")
	holder := newSource(t, env, "node-b", gi)
	if err := holder.beat.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.pass(ctx, env.Client); err != nil {
		t.Fatal(err)
	}
	claimOf := func() *kubeapi.Claim {
		t.Helper()
		var a kubeapi.Task
		if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "work", Name: "a"}, &a); err != nil {
			t.Fatal(err)
		}
		return a.Status.Claim
	}
	if cl := claimOf(); cl == nil || cl.Node != "node-b" || cl.Seq != 1 {
		t.Fatalf("a's claim %+v, want node-b's claim 1", cl)
	}

	s := newSource(t, env, "node-a", gi)
	if err := s.beat.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.pass(ctx, laggingLeases{env.Client}); err != nil {
		t.Fatal(err)
	}
	if cl := claimOf(); cl.Node != "node-b" || cl.Seq != 1 {
		t.Fatalf("node-a took a over from a live node-b (claim %+v): it trusted a cache without node-b's Lease", cl)
	}
	if evs := pending(s); len(evs) != 0 {
		t.Errorf("node-a presented %+v", evs)
	}

	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "lardon3d", Name: kube.LeaseName("node-b")}}
	if err := env.Client.Delete(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := s.pass(ctx, laggingLeases{env.Client}); err != nil {
		t.Fatal(err)
	}
	if cl := claimOf(); cl.Node != "node-a" || cl.Seq != 2 {
		t.Errorf("after node-b's Lease was deleted a's claim is %+v, want node-a's claim 2", cl)
	}
}
