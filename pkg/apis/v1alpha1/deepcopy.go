// +kubebuilder:object:generate=true

package v1alpha1

// The marker above asks controller-gen (`make generate`) for the deep-copy
// functions of this package's types (zz_generated.deepcopy.go), which the
// Kubernetes form of a Task (package kubeapi) needs to embed TaskSpec and
// TaskStatus as they are.
