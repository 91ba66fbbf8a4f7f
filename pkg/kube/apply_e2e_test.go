package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// applyExamples server-side applies every manifest of examples/tasks/, as
// `kubectl apply --server-side -f examples/tasks/ -n NS` does, and returns
// the spool parser's reading of each file by name.
func applyExamples(t *testing.T, ctx context.Context, c ctrlclient.Client, ns string) map[string]*v1alpha1.Task {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubetest.RepoRoot(t), "examples", "tasks", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example manifests: %v", err)
	}
	want := map[string]*v1alpha1.Task{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		spool, err := v1alpha1.ParseManifest(filepath.Base(f), data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want[spool.Metadata.Name] = spool
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		u.SetNamespace(ns)
		if err := c.Apply(ctx, ctrlclient.ApplyConfigurationFromUnstructured(u), ctrlclient.FieldOwner("kubectl")); err != nil {
			t.Fatalf("applying %s: %v", f, err)
		}
	}
	return want
}

// TestApplyExamplesAndPrinterColumns applies the bundled pipeline to a real
// API server, reads the Tasks back (their spec is the spool parser's, once
// defaulted), writes a status through the status subresource, and checks
// the table `kubectl get tasks` prints: the server's Table form with the
// columns of the CRD.
func TestApplyExamplesAndPrinterColumns(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := env.Client
	const ns = "castle"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	want := applyExamples(t, ctx, c, ns)
	var list kubeapi.TaskList
	if err := c.List(ctx, &list, ctrlclient.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != len(want) {
		t.Fatalf("listed %d tasks, applied %d", len(list.Items), len(want))
	}
	for i := range list.Items {
		kt := &list.Items[i]
		w, ok := want[kt.Name]
		if !ok {
			t.Fatalf("unexpected task %q", kt.Name)
		}
		core := kt.Core()
		v1alpha1.SetDefaults(&core, kt.Name+".yaml")
		if !reflect.DeepEqual(core.Spec, w.Spec) {
			t.Errorf("%s: spec read back from the API server differs:\n%+v\n%+v", kt.Name, core.Spec, w.Spec)
		}
		if !reflect.DeepEqual(kt.Status, kubeapi.TaskStatus{}) {
			t.Errorf("%s: a new task has a status: %+v", kt.Name, kt.Status)
		}
	}

	// Applying the same files again changes nothing (no new generation).
	var before kubeapi.Task
	if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "castle-import"}, &before); err != nil {
		t.Fatal(err)
	}
	applyExamples(t, ctx, c, ns)
	var after kubeapi.Task
	if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "castle-import"}, &after); err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("re-applying the same manifest changed the object: generation %d→%d, rv %s→%s",
			before.Generation, after.Generation, before.ResourceVersion, after.ResourceVersion)
	}

	// The status subresource: a status write through it keeps the spec, and
	// a write of the main resource does not touch the status.
	st := after.DeepCopy()
	st.Status.Phase = v1alpha1.PhaseRunning
	st.Status.Progress = v1alpha1.Progress{ItemsDone: 8, ItemsTotal: 16, BatchesDone: 1}
	st.Status.Claim = &kubeapi.Claim{Node: "node-a", Seq: 1, ClaimedAt: metav1.Now()}
	st.Status.Conditions = []metav1.Condition{
		{Type: v1alpha1.ConditionValid, Status: metav1.ConditionTrue, Reason: "Valid", Message: "ok", LastTransitionTime: metav1.Now()},
		{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "MemoryShort", Message: "needs 1GiB", LastTransitionTime: metav1.Now()},
	}
	st.Spec.Retries = 99 // ignored by the status subresource
	if err := c.Status().Update(ctx, st); err != nil {
		t.Fatalf("status update: %v", err)
	}
	var got kubeapi.Task
	if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "castle-import"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Retries != after.Spec.Retries {
		t.Errorf("a status write changed spec.retries to %d", got.Spec.Retries)
	}
	if got.Status.Claim == nil || got.Status.Claim.Node != "node-a" || got.Status.Progress.ItemsDone != 8 {
		t.Errorf("status not stored: %+v", got.Status)
	}
	upd := got.DeepCopy()
	upd.Status.Phase = v1alpha1.PhaseFailed
	upd.Spec.Retries = 3
	if err := c.Update(ctx, upd); err != nil {
		t.Fatalf("spec update: %v", err)
	}
	if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: "castle-import"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != v1alpha1.PhaseRunning || got.Spec.Retries != 3 {
		t.Errorf("a spec write: phase %q (want Running kept), retries %d (want 3)", got.Status.Phase, got.Spec.Retries)
	}

	// The schema rejects a manifest the spool would reject for its shape.
	bad := &kubeapi.Task{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns}}
	if err := c.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "command") {
		t.Errorf("a task without spec.command was accepted (err %v)", err)
	}

	// kubectl get tasks: the server's Table.
	table := getTable(t, env.Config, "/apis/lardon3d.io/v1alpha1/namespaces/"+ns+"/tasks")
	var names []string
	for _, col := range table.ColumnDefinitions {
		names = append(names, col.Name)
	}
	if got, want := strings.Join(names, ","), "Name,Phase,Progress,Items,Node,Reason,Age"; got != want {
		t.Fatalf("columns %s, want %s", got, want)
	}
	rows := map[string][]any{}
	for _, r := range table.Rows {
		rows[fmt.Sprint(r.Cells[0])] = r.Cells
	}
	if len(rows) != len(want) {
		t.Fatalf("table has %d rows, want %d", len(rows), len(want))
	}
	imp := rows["castle-import"]
	if fmt.Sprint(imp[1:6]) != "[Running 8 16 node-a MemoryShort]" {
		t.Errorf("castle-import row %v, want Running 8 16 node-a MemoryShort", imp)
	}
	if age, _ := imp[6].(string); age == "" {
		t.Errorf("castle-import has no age: %v", imp)
	}
	if sfm := rows["castle-sfm"]; fmt.Sprint(sfm[1:6]) != "[<nil> <nil> <nil> <nil> <nil>]" {
		t.Errorf("castle-sfm, never run, shows %v", sfm)
	}
}

// getTable asks the API server for the Table form of a list, as kubectl get
// does.
func getTable(t *testing.T, cfg *rest.Config, path string) *metav1.Table {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, strings.TrimRight(cfg.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", path, resp.Status, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatalf("decoding the table: %v\n%s", err, body)
	}
	return &table
}

// TestTasksResolveBesideTektonsTasks: on a cluster that also has Tekton
// (tasks.tekton.dev), `kubectl get tasks.lardon3d.io`, `kubectl get ltask`
// and `kubectl get lardon3d` (the category) name this project's Tasks,
// resolved as kubectl resolves them (discovery, short names, categories);
// plain `tasks` may name either.
func TestTasksResolveBesideTektonsTasks(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tekton := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: tasks.tekton.dev}
spec:
  group: tekton.dev
  scope: Namespaced
  names: {plural: tasks, singular: task, kind: Task, categories: [tekton, tekton-pipelines]}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`), &tekton.Object); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, tekton); err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var mapper meta.RESTMapper
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Discovery serves the new CRD once it is established.
		cached := memory.NewMemCacheClient(dc)
		mapper = restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
		if _, err := mapper.KindFor(schema.GroupVersionResource{Group: "tekton.dev", Resource: "tasks"}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("tasks.tekton.dev never served")
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, arg := range []string{"tasks.lardon3d.io", "task.lardon3d.io", "ltask"} {
		_, gr := schema.ParseResourceArg(arg)
		gvk, err := mapper.KindFor(gr.WithVersion(""))
		if err != nil || gvk.Group != kubeapi.GroupVersion.Group || gvk.Kind != "Task" {
			t.Errorf("kubectl get %s names %v (%v), want lardon3d.io's Task", arg, gvk, err)
		}
	}
	grs, _ := restmapper.NewDiscoveryCategoryExpander(memory.NewMemCacheClient(dc)).Expand("lardon3d")
	if len(grs) != 1 || grs[0] != (schema.GroupResource{Group: kubeapi.GroupVersion.Group, Resource: "tasks"}) {
		t.Errorf("kubectl get lardon3d names %v, want tasks.lardon3d.io alone", grs)
	}
	gvk, err := mapper.KindFor(schema.GroupVersionResource{Resource: "tasks"})
	t.Logf("plain `tasks` names %v (%v): use tasks.lardon3d.io or ltask", gvk, err)
}
