package kubeapi

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// GroupVersion is lardon3d.io/v1alpha1, the apiVersion of a Task.
var GroupVersion = schema.GroupVersion{Group: "lardon3d.io", Version: "v1alpha1"}

// Resource is the Task resource, tasks.lardon3d.io.
var Resource = GroupVersion.WithResource("tasks")

// AddToScheme registers Task and TaskList in a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Task{}, &TaskList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Core is the task in the form the shared core (queue, governor, reconciler)
// knows: the spool's Task. The spec and status are copied deeply; the claim,
// which the core never sees, is left out.
func (t *Task) Core() v1alpha1.Task {
	return v1alpha1.Task{
		APIVersion: v1alpha1.APIVersion,
		Kind:       v1alpha1.KindTask,
		Metadata: v1alpha1.ObjectMeta{
			Name:        t.Name,
			Labels:      maps.Clone(t.Labels),
			Annotations: maps.Clone(t.Annotations),
			Generation:  t.Generation,
		},
		Spec:   *t.Spec.DeepCopy(),
		Status: *t.Status.TaskStatus.DeepCopy(),
	}
}
