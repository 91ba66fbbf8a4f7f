package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
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

// TaskClient is the part of a controller-runtime client a Claimer needs:
// reading a Task and writing its status subresource.
type TaskClient interface {
	Get(ctx context.Context, key ctrlclient.ObjectKey, obj ctrlclient.Object, opts ...ctrlclient.GetOption) error
	Status() ctrlclient.SubResourceWriter
}

// Claimer claims Tasks for one node.
type Claimer struct {
	// Client reads Tasks and writes their status subresource.
	Client TaskClient
	// Node is the name recorded in status.claim.node.
	Node string
	// Now is the clock of claimedAt (time.Now when nil).
	Now func() time.Time
	// Liveness says whose Lease expired (TakeOver, Reopen); nil finds no
	// Lease expired, only missing ones or ones held by someone else.
	Liveness *Liveness
}

// Claimable reports whether a task, as read, may be claimed: nobody holds
// it (never claimed, or released) and it is Pending (or new, without a
// phase yet).
func Claimable(t *kubeapi.Task) bool {
	if cl := t.Status.Claim; cl != nil && cl.ReleasedAt == nil {
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
// The claim's Seq is one more than the last claim's: 1 for a first claim
// (Claimable requires no claim yet); TakeOver writes the others.
// Errors other than a conflict (the API server unreachable, the status
// refused by the schema, RBAC) are returned as errors.
func (c *Claimer) Claim(ctx context.Context, task *kubeapi.Task, contract v1alpha1.Contract) (ClaimOutcome, error) {
	if !Claimable(task) {
		return NotClaimable, nil
	}
	return c.claim(ctx, task, contract)
}

// TakeOverable reports whether a claimed task, as read, may be taken over at
// now: it has not ended and its holder is gone (HolderGone). A restarted
// agent takes over its own former claims the same way: the batches it ran
// are gone with it.
func TakeOverable(t *kubeapi.Task, holder *coordinationv1.Lease, live *Liveness) bool {
	return t.Status.Claim != nil && !v1alpha1.IsTerminal(t.Status.Phase) && HolderGone(t, holder, live)
}

// HolderGone reports whether the holder of t's claim is gone: its Lease
// (holder, nil when there is none) is held by someone else, or live, this
// process's view of the Leases, finds it expired.
func HolderGone(t *kubeapi.Task, holder *coordinationv1.Lease, live *Liveness) bool {
	if t.Status.Claim == nil {
		return false
	}
	if t.Status.Claim.ReleasedAt != nil {
		return true // let go by its holder
	}
	if holder == nil || holder.Spec.HolderIdentity == nil || *holder.Spec.HolderIdentity != t.Status.Claim.Node {
		return true
	}
	return live.Expired(holder)
}

// Reopen claims a task that ended (Done, Failed or Rejected) and asks to
// run again (the caller found its spec is not the one its status ended
// with: a new spec.retryToken, an edit), whose holder is gone
// (HolderGone): a holder still running takes the change itself. Same
// conditional update and Seq+1 as TakeOver.
func (c *Claimer) Reopen(ctx context.Context, task *kubeapi.Task, holder *coordinationv1.Lease, contract v1alpha1.Contract) (ClaimOutcome, error) {
	if !v1alpha1.IsTerminal(task.Status.Phase) || !HolderGone(task, holder, c.Liveness) {
		return NotClaimable, nil
	}
	return c.claim(ctx, task, contract)
}

// TakeOver claims a task whose holder is gone (TakeOverable), with the same
// conditional update as Claim and Seq+1. Progress is kept: the new holder
// resumes from the items the status says are committed; the former
// holder's process group record is dropped. The former holder,
// if it comes back, finds its writes fenced (Commit returns ErrFenced).
func (c *Claimer) TakeOver(ctx context.Context, task *kubeapi.Task, holder *coordinationv1.Lease, contract v1alpha1.Contract) (ClaimOutcome, error) {
	if !TakeOverable(task, holder, c.Liveness) {
		return NotClaimable, nil
	}
	return c.claim(ctx, task, contract)
}

func (c *Claimer) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// claim writes this node's claim with Seq+1, conditional on task's
// resourceVersion.
func (c *Claimer) claim(ctx context.Context, task *kubeapi.Task, contract v1alpha1.Contract) (ClaimOutcome, error) {
	if task.ResourceVersion == "" {
		return 0, fmt.Errorf("claim %s/%s: the task has no resourceVersion (it was not read from the API server)", task.Namespace, task.Name)
	}
	// A claim is the move Pending → Reserved (a new task, without a phase
	// yet, is Pending first); a takeover of a Reserved, Running or Paused
	// task is also the restart of the phase machine (→ Pending), in the
	// same write.
	next := task.DeepCopy()
	for _, to := range []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseReserved} {
		if err := next.Status.SetPhase(to); err != nil {
			return 0, fmt.Errorf("claim %s/%s: %w", task.Namespace, task.Name, err)
		}
	}
	next.Status.Claim = &kubeapi.Claim{
		Node:      c.Node,
		Seq:       lastSeq(task) + 1,
		ClaimedAt: metav1.NewTime(c.now()),
	}
	next.Status.Reservation = contract.DeepCopy()
	// A process group recorded by the former holder names a process on
	// another machine: the new holder's restart logic must never kill a
	// local process by that number.
	next.Status.ProcessGroup = nil
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

// ErrFenced says the task is no longer held under the claim a write was made
// for: another node took it over, or the claim was dropped. The caller must
// kill the task's batches at once and never write its status again under
// that claim; it may take part again only through a fresh Claim or TakeOver.
var ErrFenced = errors.New("the task is held under another claim")

// Holds reports whether task, as read, is held by this node under claim seq.
func (c *Claimer) Holds(task *kubeapi.Task, seq int64) bool {
	cl := task.Status.Claim
	return cl != nil && cl.Node == c.Node && cl.Seq == seq && cl.ReleasedAt == nil
}

// Commit writes a status change of a task this node holds under claim seq
// (for instance the progress at the end of a batch): mutate edits a copy of
// the status, and the update is conditional on the resourceVersion. On a
// conflict the task is read again: still held under seq, mutate is applied
// to the fresh read and written again; held under another claim, nothing
// is written and Commit returns ErrFenced. On success *task is the stored
// object. mutate cannot change the claim: what it writes there is put
// back.
func (c *Claimer) Commit(ctx context.Context, task *kubeapi.Task, seq int64, mutate func(*kubeapi.TaskStatus)) error {
	return c.update(ctx, task, seq, "commit", func(next *kubeapi.Task) error {
		claim := next.Status.Claim.DeepCopy()
		mutate(&next.Status)
		next.Status.Claim = claim
		return nil
	})
}

// Release lets go of a task this node holds under claim seq (the node
// drains): the claim is marked released (ReleasedAt), the task is Pending
// unless it ended, its reservation and process group are dropped and its
// committed progress kept. Any node may claim it again at once, with
// Seq+1; this node's writes under seq are fenced from then on. Conditional
// as Commit is: ErrFenced when the task is held under another claim.
func (c *Claimer) Release(ctx context.Context, task *kubeapi.Task, seq int64) error {
	return c.update(ctx, task, seq, "release", func(next *kubeapi.Task) error {
		if !v1alpha1.IsTerminal(next.Status.Phase) {
			if err := next.Status.SetPhase(v1alpha1.PhasePending); err != nil {
				return err
			}
		}
		next.Status.Reservation, next.Status.ProcessGroup = nil, nil
		now := metav1.NewTime(c.now())
		next.Status.Claim.ReleasedAt = &now
		return nil
	})
}

// update writes mutate's change of a task held under claim seq,
// conditional on the resourceVersion; on a conflict it reads the task
// again and, still held under seq, applies mutate to the fresh read.
func (c *Claimer) update(ctx context.Context, task *kubeapi.Task, seq int64, what string, mutate func(*kubeapi.Task) error) error {
	cur := task.DeepCopy()
	for attempt := 0; ; attempt++ {
		if !c.Holds(cur, seq) {
			return fmt.Errorf("%s %s/%s on node %s under claim %d (now %s): %w", what, task.Namespace, task.Name, c.Node, seq, describeClaim(cur.Status.Claim), ErrFenced)
		}
		next := cur.DeepCopy()
		if err := mutate(next); err != nil {
			return fmt.Errorf("%s %s/%s: %w", what, task.Namespace, task.Name, err)
		}
		err := c.Client.Status().Update(ctx, next)
		if err == nil {
			*task = *next
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= 10 {
			return fmt.Errorf("%s %s/%s on node %s: %w", what, task.Namespace, task.Name, c.Node, err)
		}
		cur = &kubeapi.Task{}
		if err := c.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(task), cur); err != nil {
			return fmt.Errorf("%s %s/%s: reading it again after a conflict: %w", what, task.Namespace, task.Name, err)
		}
	}
}

func describeClaim(cl *kubeapi.Claim) string {
	if cl == nil {
		return "unclaimed"
	}
	if cl.ReleasedAt != nil {
		return fmt.Sprintf("claim %d by %s, released", cl.Seq, cl.Node)
	}
	return fmt.Sprintf("claim %d by %s", cl.Seq, cl.Node)
}
