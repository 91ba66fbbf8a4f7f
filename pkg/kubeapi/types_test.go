package kubeapi_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// TestExamplesAreTheSameDocument decodes every manifest of examples/tasks/
// strictly (an unknown field is an error) into the Kubernetes form and checks
// that its spec, defaulted, is the one the spool's parser reads from the
// same bytes.
func TestExamplesAreTheSameDocument(t *testing.T) {
	files, err := filepath.Glob("../../examples/tasks/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example manifests: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		spool, err := v1alpha1.ParseManifest(filepath.Base(f), data)
		if err != nil {
			t.Fatalf("%s: spool parser: %v", f, err)
		}
		var kt kubeapi.Task
		if err := yaml.UnmarshalStrict(data, &kt); err != nil {
			t.Fatalf("%s: strict decoding into kubeapi.Task: %v", f, err)
		}
		if kt.APIVersion != kubeapi.GroupVersion.String() || kt.Kind != "Task" {
			t.Errorf("%s: apiVersion/kind %q/%q", f, kt.APIVersion, kt.Kind)
		}
		core := kt.Core()
		// The spool's parser applies the defaults; a node agent does the same.
		v1alpha1.SetDefaults(&core, filepath.Base(f))
		if !reflect.DeepEqual(core.Spec, spool.Spec) {
			t.Errorf("%s: spec differs:\nkube  %+v\nspool %+v", f, core.Spec, spool.Spec)
		}
		if core.Metadata.Name != spool.Metadata.Name || !reflect.DeepEqual(core.Metadata.Labels, spool.Metadata.Labels) {
			t.Errorf("%s: metadata differs: %+v vs %+v", f, core.Metadata, spool.Metadata)
		}
	}
}

// TestStatusKeepsTheSpoolFieldsAndAddsTheClaim checks that the inline
// embedding puts the spool's status fields at the top of status, beside
// claim, and that Core copies deeply and drops the claim.
func TestStatusKeepsTheSpoolFieldsAndAddsTheClaim(t *testing.T) {
	in := []byte(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: a, namespace: ns, labels: {x: "1"}}
spec: {command: [true], items: {count: 3}}
status:
  phase: Running
  progress: {itemsDone: 2, itemsTotal: 3, batchesDone: 1}
  claim: {node: n1, seq: 4, claimedAt: "2026-01-02T03:04:05Z"}
`)
	var kt kubeapi.Task
	if err := yaml.UnmarshalStrict(in, &kt); err != nil {
		t.Fatal(err)
	}
	if kt.Status.Phase != v1alpha1.PhaseRunning || kt.Status.Progress.ItemsDone != 2 {
		t.Fatalf("spool status fields not read: %+v", kt.Status)
	}
	if kt.Status.Claim == nil || kt.Status.Claim.Node != "n1" || kt.Status.Claim.Seq != 4 {
		t.Fatalf("claim not read: %+v", kt.Status.Claim)
	}
	out, err := yaml.Marshal(&kt)
	if err != nil {
		t.Fatal(err)
	}
	var back kubeapi.Task
	if err := yaml.UnmarshalStrict(out, &back); err != nil {
		t.Fatalf("round trip: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back.Status, kt.Status) {
		t.Errorf("round trip changed the status:\n%+v\n%+v", back.Status, kt.Status)
	}

	core := kt.Core()
	core.Metadata.Labels["x"] = "changed"
	core.Spec.Command[0] = "changed"
	if kt.Labels["x"] != "1" || kt.Spec.Command[0] != "true" {
		t.Error("Core shares memory with the Kubernetes object")
	}
	if core.Status.Phase != v1alpha1.PhaseRunning || core.Metadata.Name != "a" {
		t.Errorf("Core lost fields: %+v", core)
	}

	cp := kt.DeepCopy()
	cp.Status.Claim.Node = "n2"
	if kt.Status.Claim.Node != "n1" {
		t.Error("DeepCopy shares the claim")
	}
}
