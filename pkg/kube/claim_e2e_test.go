package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

func newClient(t *testing.T, env *kubetest.Env, cfg *rest.Config) ctrlclient.Client {
	t.Helper()
	c, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createTasks(t testing.TB, ctx context.Context, c ctrlclient.Client, ns string, n int) {
	t.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for i := range n {
		task := &kubeapi.Task{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("t%03d", i)},
			Spec: v1alpha1.TaskSpec{
				Command: []string{"lardon3d-synth"},
				Items:   v1alpha1.Items{Count: ptr.To[int64](4)},
			},
		}
		if err := c.Create(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
}

func contractFor(node string) v1alpha1.Contract {
	return v1alpha1.Contract{
		Batch: 4, BatchRequested: 4, Threads: 1,
		Memory:     resource.MustParse("64Mi"),
		GrantedAt:  metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		ScratchDir: "/scratch/" + node,
	}
}

// TestNodesRaceForTheSameTasks: three nodes, each with its own connection
// and four workers, read the same list of 40 new tasks and all claim every
// one of them at once. Invariants: every task is claimed exactly once; each
// other attempt on it is a LostRace (the API server's 409), never a second
// Claimed; the stored claim names the winner with Seq 1 and the winner's
// contract; once claimed, a fresh read is NotClaimable for everyone.
func TestNodesRaceForTheSameTasks(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, n = "race", 40
	createTasks(t, ctx, env.Client, ns, n)

	nodes := []string{"node-a", "node-b", "node-c"}
	type attempt struct {
		node, task string
		outcome    kube.ClaimOutcome
	}
	var (
		mu       sync.Mutex
		attempts []attempt
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for ni, node := range nodes {
		c := newClient(t, env, rest.CopyConfig(env.Config))
		var snapshot kubeapi.TaskList
		if err := c.List(ctx, &snapshot, ctrlclient.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if len(snapshot.Items) != n {
			t.Fatalf("%s lists %d tasks, want %d", node, len(snapshot.Items), n)
		}
		claimer := &kube.Claimer{Client: c, Node: node}
		work := make(chan *kubeapi.Task)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for task := range work {
					out, err := claimer.Claim(ctx, task, contractFor(node))
					if err != nil {
						t.Errorf("%s claiming %s: %v", node, task.Name, err)
						continue
					}
					mu.Lock()
					attempts = append(attempts, attempt{node, task.Name, out})
					mu.Unlock()
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(work)
			<-start
			// Each node walks the list from a different place, so that the
			// races spread over the whole list.
			for i := range n {
				work <- &snapshot.Items[(i+ni*n/len(nodes))%n]
			}
		}()
	}
	close(start)
	wg.Wait()

	winners := map[string]string{}
	perTask := map[string]int{}
	wins := map[string]int{}
	for _, a := range attempts {
		perTask[a.task]++
		switch a.outcome {
		case kube.Claimed:
			if w, dup := winners[a.task]; dup {
				t.Errorf("%s claimed by both %s and %s", a.task, w, a.node)
			}
			winners[a.task] = a.node
			wins[a.node]++
		case kube.LostRace:
		default:
			t.Errorf("%s on %s: %v, want Claimed or LostRace (all read the task unclaimed)", a.node, a.task, a.outcome)
		}
	}
	t.Logf("claims per node: %v", wins)
	if len(winners) != n {
		t.Fatalf("%d tasks claimed, want %d", len(winners), n)
	}
	for task, k := range perTask {
		if k != len(nodes) {
			t.Errorf("%s: %d attempts, want %d", task, k, len(nodes))
		}
	}

	var after kubeapi.TaskList
	if err := env.Client.List(ctx, &after, ctrlclient.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range after.Items {
		task := &after.Items[i]
		cl := task.Status.Claim
		if cl == nil || cl.Node != winners[task.Name] || cl.Seq != 1 {
			t.Errorf("%s: stored claim %+v, winner %s", task.Name, cl, winners[task.Name])
			continue
		}
		if task.Status.Phase != v1alpha1.PhaseReserved || task.Status.Reservation == nil ||
			task.Status.Reservation.ScratchDir != "/scratch/"+cl.Node {
			t.Errorf("%s: phase %q, reservation %+v: not the winner's contract", task.Name, task.Status.Phase, task.Status.Reservation)
		}
		for _, node := range nodes {
			c := &kube.Claimer{Client: env.Client, Node: node}
			if out, err := c.Claim(ctx, task.DeepCopy(), contractFor(node)); err != nil || out != kube.NotClaimable {
				t.Errorf("%s re-claiming claimed %s: %v, %v", node, task.Name, out, err)
			}
		}
	}
}

// TestHeartbeatLease: a node's Lease is created by its first beat, renewed
// by the next, and read as expired exactly when its duration has passed
// since its last renewal was seen (fake clock; the API server stores the
// times).
func TestHeartbeatLease(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lardon3d"}}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	hb := &kube.Heartbeat{Client: env.Client, Namespace: "lardon3d", Node: "node-a", Duration: 15 * time.Second, Now: func() time.Time { return now }}
	read := func() *coordinationv1.Lease {
		var l coordinationv1.Lease
		if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "lardon3d", Name: kube.LeaseName("node-a")}, &l); err != nil {
			t.Fatal(err)
		}
		return &l
	}
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	l := read()
	if *l.Spec.HolderIdentity != "node-a" || *l.Spec.LeaseDurationSeconds != 15 || !l.Spec.RenewTime.Time.Equal(now) {
		t.Fatalf("lease after the first beat: %+v", l.Spec)
	}
	seen := now
	live := &kube.Liveness{Now: func() time.Time { return seen }}
	live.Expired(l)
	seen = now.Add(15*time.Second - time.Millisecond)
	if live.Expired(l) {
		t.Error("expired before its duration")
	}
	seen = now.Add(15 * time.Second)
	if !live.Expired(l) {
		t.Error("not expired after its duration")
	}
	now = now.Add(10 * time.Second)
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	l = read()
	if live.Expired(l) {
		t.Errorf("a renewal seen is expired: %+v", l.Spec)
	}
	seen = seen.Add(14 * time.Second)
	if !l.Spec.RenewTime.Time.Equal(now) || live.Expired(l) {
		t.Errorf("renewal not stored: %+v", l.Spec)
	}
	if !l.Spec.AcquireTime.Time.Equal(now.Add(-10 * time.Second)) {
		t.Errorf("a renewal moved acquireTime to %v", l.Spec.AcquireTime)
	}
	if err := (&kube.Heartbeat{Client: env.Client, Namespace: "lardon3d", Node: "x", Duration: time.Millisecond}).Beat(ctx); err == nil {
		t.Error("a sub-second lease was accepted")
	}
}

// TestDeployManifestsGrantWhatANodeNeeds applies deploy/rbac.yaml and
// deploy/daemonset.yaml to a real API server (which validates them), then
// acts as the node's ServiceAccount: it may claim a task and beat its
// Lease, and may neither create a task nor change a spec.
func TestDeployManifestsGrantWhatANodeNeeds(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, f := range kustomizationResources(t) {
		if strings.HasPrefix(f, "crd/") {
			continue // installed by kubetest
		}
		data, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(t), "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---\n")) {
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := env.Client.Apply(ctx, ctrlclient.ApplyConfigurationFromUnstructured(u), ctrlclient.FieldOwner("kubectl")); err != nil {
				t.Fatalf("applying %s %s: %v", f, u.GetName(), err)
			}
		}
	}
	createTasks(t, ctx, env.Client, "work", 1)

	// The agent's probes ask what --metrics-addr serves, on its port.
	var ds appsv1.DaemonSet
	if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "lardon3d", Name: "lardon3d-node"}, &ds); err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	port := ""
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			port = fmt.Sprint(p.ContainerPort)
		}
	}
	switch {
	case port == "" || !slices.Contains(c.Args, "--metrics-addr=:"+port):
		t.Errorf("the agent's args %v do not serve its metrics port %q", c.Args, port)
	case c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Port.String() != "metrics":
		t.Errorf("liveness probe %+v", c.LivenessProbe)
	case c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.ReadinessProbe.HTTPGet.Port.String() != "metrics":
		t.Errorf("readiness probe %+v", c.ReadinessProbe)
	case ds.Spec.Template.Spec.PriorityClassName != "lardon3d-node" || c.Resources.Requests.Memory().IsZero():
		t.Errorf("priority class %q, requests %v", ds.Spec.Template.Spec.PriorityClassName, c.Resources.Requests)
	}

	// The agent runs unprivileged: no host path, no privilege, limits of
	// its own, and a Pod of its template passes the restricted Pod
	// Security profile its namespace enforces (a privileged one does not).
	pt := ds.Spec.Template.Spec
	for _, v := range pt.Volumes {
		if v.HostPath != nil {
			t.Errorf("the agent mounts the host path %s", v.HostPath.Path)
		}
	}
	if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
		t.Error("the agent is privileged")
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("the agent has no limits of its own: %v", c.Resources.Limits)
	}
	if !slices.Contains(c.Args, "--executor=pod") {
		t.Errorf("the agent's args %v do not run each batch as a Pod", c.Args)
	}
	agentPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-dry-run", Namespace: "lardon3d"}, Spec: *pt.DeepCopy()}
	agentPod.Spec.NodeName = "node-a"
	if err := env.Client.Create(ctx, agentPod, ctrlclient.DryRunAll); err != nil {
		t.Errorf("a Pod of the DaemonSet's template is refused in its namespace: %v", err)
	}
	privileged := agentPod.DeepCopy()
	privileged.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	if err := env.Client.Create(ctx, privileged, ctrlclient.DryRunAll); !apierrors.IsForbidden(err) {
		t.Errorf("the agent's namespace admits a privileged Pod (%v): Pod Security is not enforced there", err)
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:lardon3d:lardon3d-node"}
	sa := newClient(t, env, cfg)
	// It may make, follow and delete the batches' Pods and read their
	// logs; nothing that reaches into a Pod or a node.
	for _, ra := range []struct {
		ra    authorizationv1.ResourceAttributes
		allow bool
	}{
		{authorizationv1.ResourceAttributes{Namespace: "work", Verb: "create", Resource: "pods"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "work", Verb: "delete", Resource: "pods"}, true},
		{authorizationv1.ResourceAttributes{Verb: "watch", Resource: "pods"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "work", Verb: "get", Resource: "pods", Subresource: "log"}, true},
		{authorizationv1.ResourceAttributes{Namespace: "work", Verb: "create", Resource: "pods", Subresource: "exec"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "work", Verb: "update", Resource: "pods"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "work", Verb: "get", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "proxy"}, false},
	} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra.ra}}
		if err := sa.Create(ctx, review); err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != ra.allow {
			t.Errorf("the node's ServiceAccount may %s %s/%s: %v, want %v", ra.ra.Verb, ra.ra.Resource, ra.ra.Subresource, review.Status.Allowed, ra.allow)
		}
	}
	var task kubeapi.Task
	if err := sa.Get(ctx, ctrlclient.ObjectKey{Namespace: "work", Name: "t000"}, &task); err != nil {
		t.Fatalf("the node cannot read a task: %v", err)
	}
	if out, err := (&kube.Claimer{Client: sa, Node: "node-a"}).Claim(ctx, &task, contractFor("node-a")); err != nil || out != kube.Claimed {
		t.Fatalf("the node cannot claim: %v, %v", out, err)
	}
	hb := &kube.Heartbeat{Client: sa, Namespace: "lardon3d", Node: "node-a", Duration: 10 * time.Second}
	for range 2 { // create, then renew
		if err := hb.Beat(ctx); err != nil {
			t.Fatalf("the node cannot beat its lease: %v", err)
		}
	}
	if err := env.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}); err != nil {
		t.Fatal(err)
	}
	var node corev1.Node
	if err := sa.Get(ctx, ctrlclient.ObjectKey{Name: "node-a"}, &node); err != nil {
		t.Errorf("the node cannot read its Node (a cordon): %v", err)
	}
	node.Spec.Unschedulable = true
	if err := sa.Update(ctx, &node); !apierrors.IsForbidden(err) {
		t.Errorf("the node changed a Node: %v", err)
	}
	task.Spec.Retries = 7
	if err := sa.Update(ctx, &task); !apierrors.IsForbidden(err) {
		t.Errorf("the node changed a spec: %v", err)
	}
	extra := &kubeapi.Task{ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "extra"},
		Spec: v1alpha1.TaskSpec{Command: []string{"true"}, Items: v1alpha1.Items{Count: ptr.To[int64](1)}}}
	if err := sa.Create(ctx, extra); !apierrors.IsForbidden(err) {
		t.Errorf("the node created a task: %v", err)
	}
}

// kustomizationResources are the files deploy/kustomization.yaml lists
// (`kubectl apply -k deploy/`); it fails the test unless they are exactly
// deploy's manifests.
func kustomizationResources(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(kubetest.RepoRoot(t), "deploy")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("deploy/kustomization.yaml: %v", err)
	}
	var want []string
	for _, pattern := range []string{"*.yaml", "crd/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if rel, _ := filepath.Rel(dir, f); rel != "kustomization.yaml" {
				want = append(want, rel)
			}
		}
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(k.Resources))
	if k.Kind != "Kustomization" || !slices.Equal(got, want) {
		t.Fatalf("deploy/kustomization.yaml lists %v (kind %q), want every manifest of deploy/: %v", got, k.Kind, want)
	}
	return k.Resources
}
