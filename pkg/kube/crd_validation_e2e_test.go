package kube_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// TestCRDRefusesWhatValidateRefuses: the API server refuses, with the
// field's path, each invalid Task the spool's validation refuses at the
// same path (the CRD's schema and CEL rules come from the markers on the
// Go types), so that no node claims a Task only to reject it; and both
// accept the same valid variants.
func TestCRDRefusesWhatValidateRefuses(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "checks"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	manifest := func(name, spec string) string {
		return fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: %s}\nspec:\n%s", name, spec)
	}
	create := func(name, doc string) error {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		u.SetNamespace(ns)
		return env.Client.Create(ctx, u)
	}
	// path is where both put the problem; apiPath, when set, where the
	// API server does (a CEL rule cannot name a list's element).
	for i, c := range []struct{ spec, path, apiPath string }{
		{"  command: [\"true\"]\n  items: {}\n", "spec.items", ""},
		{"  command: [\"true\"]\n  items: {count: 3, glob: '*.jpg'}\n", "spec.items", ""},
		{"  command: [\"true\"]\n  items: {count: 0}\n", "spec.items.count", ""},
		{"  command: [\"true\"]\n  items: {count: 20000000}\n", "spec.items.count", ""},
		{"  command: [\"true\"]\n  items: {files: []}\n", "spec.items.files", ""},
		{"  command: []\n  items: {count: 1}\n", "spec.command", ""},
		{"  command: [\"\"]\n  items: {count: 1}\n", "spec.command[0]", "spec.command"},
		{"  command: [\"true\"]\n  items: {count: 1}\n  dependsOn: [Bad_Name]\n", "spec.dependsOn[0]", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  retries: 101\n", "spec.retries", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  env: [{name: 1X, value: v}]\n", "spec.env[0].name", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  class: bogus\n", "spec.class", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  pod: {imagePullPolicy: Never}\n", "spec.pod.image", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  pod: {image: a, imagePullPolicy: Sometimes}\n", "spec.pod.imagePullPolicy", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  pod: {image: a, volumes: [{name: d, mountPath: /d, claimName: c, emptyDir: true}]}\n", "spec.pod.volumes[0]", "spec.pod.volumes[0]"},
		{"  command: [\"true\"]\n  items: {count: 1}\n  pod: {image: a, volumes: [{name: Data, mountPath: /d, emptyDir: true}]}\n", "spec.pod.volumes[0].name", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  pod: {image: a, volumes: [{name: d, mountPath: d, emptyDir: true}]}\n", "spec.pod.volumes[0].mountPath", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  pod: {image: a, runAsUser: -1}\n", "spec.pod.runAsUser", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {threads: 5000}\n", "spec.resources.threads", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {threads: 0}\n", "spec.resources.threads", ""},
		{"  command: [\"true\"]\n  items: {count: 10}\n  resources: {batch: {max: 0}}\n", "spec.resources.batch.max", ""},
		{"  command: [\"true\"]\n  items: {count: 10}\n  resources: {batch: {min: 0}}\n", "spec.resources.batch.min", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {threads: 2, minThreads: 4}\n", "spec.resources.minThreads", ""},
		{"  command: [\"true\"]\n  items: {count: 10}\n  resources: {batch: {min: 4, max: 2}}\n", "spec.resources.batch.max", ""},
		{"  command: [\"true\"]\n  items: {count: 10}\n  resources: {batch: {max: 20}}\n", "spec.resources.batch.max", ""},
		{"  command: [\"true\"]\n  items: {files: [a, b]}\n  resources: {batch: {max: 3}}\n", "spec.resources.batch.max", ""},
		{"  command: [\"true\"]\n  items: {count: 10}\n  resources: {batch: {min: 11}}\n", "spec.resources.batch.min", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {estimate: guess}\n", "spec.resources.estimate", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {fixed: {memory: -1Gi}}\n", "spec.resources.fixed.memory", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {perItem: {gpuMemory: -5}}\n", "spec.resources.perItem.gpuMemory", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {scratch: -1Gi}\n", "spec.resources.scratch", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {ioSlots: -1}\n", "spec.resources.ioSlots", ""},
		{"  command: [\"true\"]\n  items: {count: 1}\n  resources: {profile: Bad Profile}\n", "spec.resources.profile", ""},
	} {
		name := fmt.Sprintf("bad-%02d", i)
		doc := manifest(name, c.spec)
		_, perr := v1alpha1.ParseManifest(name+".yaml", []byte(doc))
		var list v1alpha1.ErrorList
		if !errors.As(perr, &list) || !hasPath(list, c.path) {
			t.Errorf("%s (%s): the spool's validation says %v, want a problem at %s", name, strings.TrimSpace(c.spec), perr, c.path)
		}
		apiPath := cmp.Or(c.apiPath, c.path)
		err := create(name, doc)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), apiPath+":") {
			t.Errorf("%s (%s): the API server says %v, want Invalid at %s", name, strings.TrimSpace(c.spec), err, apiPath)
		}
	}
	for i, spec := range []string{
		"  command: [\"true\"]\n  items: {count: 10}\n  resources: {batch: {min: 2, max: 10}, threads: 4, minThreads: 2, fixed: {memory: 1Gi}, scratch: 0}\n",
		"  command: [\"true\"]\n  items: {glob: 'images/*.jpg'}\n  resources: {batch: {max: 500}, estimate: learned, profile: features.colmap}\n",
		"  command: [\"true\"]\n  items: {files: [a, b]}\n  dependsOn: [extract]\n  env: [{name: OMP_NUM_THREADS, value: '4'}]\n  class: features\n  retries: 3\n",
		"  command: [\"true\"]\n  items: {glob: '*.tif'}\n  resources: {batch: {max: 0}, perThread: {memory: 512}, gpuSlots: 1, ioSlots: 2}\n",
	} {
		name := fmt.Sprintf("good-%02d", i)
		doc := manifest(name, spec)
		if _, err := v1alpha1.ParseManifest(name+".yaml", []byte(doc)); err != nil {
			t.Errorf("%s: the spool's validation refuses it: %v", name, err)
		}
		if err := create(name, doc); err != nil {
			t.Errorf("%s: the API server refuses it: %v", name, err)
		}
	}
}

// TestCRDKeysConditionsByType: status.conditions is a map keyed by type
// (listType=map): a status with two conditions of one type is refused.
func TestCRDKeysConditionsByType(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	createTasks(t, ctx, env.Client, "keys", 1)
	var task kubeapi.Task
	if err := env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: "keys", Name: "t000"}, &task); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	c := metav1.Condition{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionTrue, Reason: "Admitted", LastTransitionTime: now}
	task.Status.Conditions = []metav1.Condition{c, c}
	if err := env.Client.Status().Update(ctx, &task); !apierrors.IsInvalid(err) {
		t.Errorf("two Admitted conditions: %v, want Invalid", err)
	}
	task.Status.Conditions = task.Status.Conditions[:1]
	if err := env.Client.Status().Update(ctx, &task); err != nil {
		t.Errorf("one Admitted condition: %v", err)
	}
}

// hasPath reports whether list has a problem at path.
func hasPath(list v1alpha1.ErrorList, path string) bool {
	for _, e := range list {
		if e.Path == path {
			return true
		}
	}
	return false
}
