package kubeapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// Task is the Kubernetes form of a v1alpha1 Task: the same spec and status,
// with Kubernetes' metadata.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,path=tasks,singular=task,shortName=ltask,categories=lardon3d
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=integer,JSONPath=`.status.progress.itemsDone`,description="Items committed"
// +kubebuilder:printcolumn:name="Items",type=integer,JSONPath=`.status.progress.itemsTotal`,description="Items of the task"
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.claim.node`,description="The node that claimed the task"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.status=="False")].reason`,description="Why the task is not progressing"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Task struct {
	metav1.TypeMeta `json:",inline"`
	// Metadata is Kubernetes' object metadata.
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the user asks for, exactly as in the spool.
	Spec v1alpha1.TaskSpec `json:"spec"`
	// Status is written by the node agents only.
	// +optional
	Status TaskStatus `json:"status,omitempty"`
}

// TaskStatus is the spool's status plus the claim.
//
// On the API server, observedGeneration (and each condition's) is the
// metadata.generation of the spec the status reflects, as Kubernetes
// tools expect; the count of specs the task ran under, which the spool
// mode keeps in observedGeneration, is SpecRevision.
type TaskStatus struct {
	v1alpha1.TaskStatus `json:",inline"`
	// SpecRevision counts the specs the task ran under (an edit of the
	// spec, a retry or a restart makes a new one; a pause, a change of
	// spec.paused, does not): the nodes' own count, observedGeneration in
	// the spool.
	// +optional
	SpecRevision int64 `json:"specRevision,omitempty"`
	// Claim says which node runs the task. It is written by one conditional
	// update of the status (the resourceVersion read): of two nodes claiming
	// the same task, the API server lets exactly one through.
	// +optional
	Claim *Claim `json:"claim,omitempty"`
}

// Claim records the node that holds a task.
type Claim struct {
	// Node is the name of the node agent that holds the task.
	Node string `json:"node"`
	// Seq counts the claims of the task, from 1; a takeover after a node's
	// Lease expired claims with Seq+1, so a stale agent's writes, made under
	// an older Seq, can be told apart from the holder's.
	Seq int64 `json:"seq"`
	// ClaimedAt is when the claim was written.
	ClaimedAt metav1.Time `json:"claimedAt"`
	// ReleasedAt, when set, is when the holder let the task go (its node
	// drained: cordoned, or its agent stopping): any node may claim it
	// again at once, with Seq+1, without waiting for the holder's Lease to
	// expire; the holder writes nothing more under this claim.
	// +optional
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`
}

// TaskList is a list of Tasks.
//
// +kubebuilder:object:root=true
type TaskList struct {
	metav1.TypeMeta `json:",inline"`
	// ListMeta is Kubernetes' list metadata.
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the tasks.
	Items []Task `json:"items"`
}
