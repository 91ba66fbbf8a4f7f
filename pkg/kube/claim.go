package kube

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// ClaimOutcome is what a claim attempt came to.
type ClaimOutcome int

const (
	// Claimed: this node now holds the task; the status records the claim,
	// the contract and phase Reserved.
	Claimed ClaimOutcome = iota + 1
	// LostRace: the task changed since it was read (HTTP 409 Conflict):
	// another node claimed it first, or someone else wrote it. Nothing was
	// written; read the task again before deciding anything.
	LostRace
	// NotClaimable: the task as read is already claimed or not Pending;
	// nothing was sent.
	NotClaimable
)

func (o ClaimOutcome) String() string {
	switch o {
	case Claimed:
		return "Claimed"
	case LostRace:
		return "LostRace"
	case NotClaimable:
		return "NotClaimable"
	}
	return fmt.Sprintf("ClaimOutcome(%d)", int(o))
}

// StatusWriter is the part of a controller-runtime client a Claimer needs:
// the status subresource.
type StatusWriter interface {
	Status() ctrlclient.SubResourceWriter
}

// Claimer claims Tasks for one node.
type Claimer struct {
	// Client writes the status subresource.
	Client StatusWriter
	// Node is the name recorded in status.claim.node.
	Node string
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Claimable reports whether a task, as read, may be claimed: nobody holds
// it and it is Pending (or new, without a phase yet).
func Claimable(t *kubeapi.Task) bool {
	if t.Status.Claim != nil {
		return false
	}
	return t.Status.Phase == "" || t.Status.Phase == v1alpha1.PhasePending
}

// Claim tries to take task for c.Node under contract, with one update of the
// status subresource conditional on the resourceVersion task was read at:
// of any number of nodes claiming the same read of a task, exactly one
// succeeds and the others get LostRace. On Claimed, *task is the stored
// object (its new resourceVersion); otherwise *task is untouched.
//
// The claim's Seq is one more than the last claim's. Only first claims are
// made here (Claimable requires no claim yet); a takeover of an expired
// node's task is the same conditional update with Seq+1, not written yet.
// Errors other than a conflict (the API server unreachable, the status
// refused by the schema, RBAC) are returned as errors.
func (c *Claimer) Claim(ctx context.Context, task *kubeapi.Task, contract v1alpha1.Contract) (ClaimOutcome, error) {
	if !Claimable(task) {
		return NotClaimable, nil
	}
	if task.ResourceVersion == "" {
		return 0, fmt.Errorf("claim %s/%s: the task has no resourceVersion (it was not read from the API server)", task.Namespace, task.Name)
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	next := task.DeepCopy()
	next.Status.Claim = &kubeapi.Claim{
		Node:      c.Node,
		Seq:       lastSeq(task) + 1,
		ClaimedAt: metav1.NewTime(now()),
	}
	next.Status.Reservation = contract.DeepCopy()
	next.Status.Phase = v1alpha1.PhaseReserved
	// Update sends next.ResourceVersion: the API server applies it only if
	// the object is still at that version, and answers 409 otherwise.
	if err := c.Client.Status().Update(ctx, next); err != nil {
		if apierrors.IsConflict(err) {
			return LostRace, nil
		}
		return 0, fmt.Errorf("claim %s/%s for node %s: %w", task.Namespace, task.Name, c.Node, err)
	}
	*task = *next
	return Claimed, nil
}

// lastSeq is the sequence number of the task's last claim, 0 if never
// claimed.
func lastSeq(t *kubeapi.Task) int64 {
	if t.Status.Claim != nil {
		return t.Status.Claim.Seq
	}
	return 0
}
