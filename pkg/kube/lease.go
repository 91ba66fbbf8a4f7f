package kube

import (
	"context"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// LeasePrefix prefixes the name of each node's Lease.
const LeasePrefix = "lardon3d-node-"

// LeaseName is the name of node's Lease.
func LeaseName(node string) string { return LeasePrefix + node }

// Heartbeat renews one node's coordination.k8s.io Lease. The Lease only says
// who is alive; it is no fence (a paused process can renew late): the claim's
// conditional update is.
type Heartbeat struct {
	// Client reads and writes Leases.
	Client ctrlclient.Client
	// Namespace holds the Leases of all nodes.
	Namespace string
	// Node is the holder identity.
	Node string
	// Duration is how long a renewal keeps the node alive.
	Duration time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Annotations, when set, is called at every beat; what it returns is
	// set on the Lease (a node publishes its capacity there).
	Annotations func() map[string]string
}

func (h *Heartbeat) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Beat creates or renews the node's Lease once. A conflict (another writer
// between our read and our write) is retried once from a fresh read.
func (h *Heartbeat) Beat(ctx context.Context) error {
	if h.Duration < time.Second {
		return fmt.Errorf("lease of node %s: duration %v is under the 1 s the API counts in", h.Node, h.Duration)
	}
	var err error
	for range 2 {
		if err = h.beatOnce(ctx); !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return err
}

func (h *Heartbeat) beatOnce(ctx context.Context) error {
	now := metav1.NewMicroTime(h.now())
	secs := int32(h.Duration / time.Second)
	var l coordinationv1.Lease
	err := h.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: h.Namespace, Name: LeaseName(h.Node)}, &l)
	switch {
	case apierrors.IsNotFound(err):
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: h.Namespace, Name: LeaseName(h.Node), Annotations: h.annotations(nil)},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       &h.Node,
				LeaseDurationSeconds: &secs,
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		return h.Client.Create(ctx, &l)
	case err != nil:
		return fmt.Errorf("lease of node %s: %w", h.Node, err)
	}
	l.Annotations = h.annotations(l.Annotations)
	l.Spec.HolderIdentity = &h.Node
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &now
	return h.Client.Update(ctx, &l)
}

// annotations merges what h.Annotations returns over have.
func (h *Heartbeat) annotations(have map[string]string) map[string]string {
	if h.Annotations == nil {
		return have
	}
	add := h.Annotations()
	if len(add) == 0 {
		return have
	}
	if have == nil {
		have = make(map[string]string, len(add))
	}
	maps.Copy(have, add)
	return have
}

// Run beats every interval until ctx ends, and returns ctx's error. A failed
// beat is reported to onError (when not nil) and retried at the next tick:
// the node stays up, and its Lease expires if the failures last.
func (h *Heartbeat) Run(ctx context.Context, every time.Duration, onError func(error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := h.Beat(ctx); err != nil && onError != nil && ctx.Err() == nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Expired reports whether a Lease, as read, has not been renewed within its
// duration at now. A Lease without a renewal time or a duration is expired.
func Expired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return !now.Before(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}
