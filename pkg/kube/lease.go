package kube

import (
	"context"
	"fmt"
	"maps"
	"sync"
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

// Run beats every period until ctx ends, and returns ctx's error. Each
// beat is bounded by timeout (a hung API server must not stop the count of
// failures) and reported to report (when not nil) with the time it
// started: a successful beat started at start proves the node alive at
// start, no later. A failed beat is retried at the next tick.
func (h *Heartbeat) Run(ctx context.Context, period, timeout time.Duration, report func(start time.Time, err error)) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		start := time.Now()
		bctx, cancel := context.WithTimeout(ctx, timeout)
		err := h.Beat(bctx)
		cancel()
		if report != nil && ctx.Err() == nil {
			report(start, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Liveness tells whether nodes' Leases expired as client-go's leader
// election does: a Lease is expired once this process has seen it
// unchanged (same holder, renewal time and duration) for its whole
// duration, counted on this process's own clock from the moment it first
// saw that version. The renewal time itself, written on another machine's
// clock, is only compared for equality: a holder whose clock is an hour
// behind is alive while it renews, one whose clock is ahead expires on
// time.
//
// A sighting counts only from the last Resume: a process that could not
// reach the API server for a while (its own renewals failed) saw nobody
// renew, and must watch every Lease for a whole duration again before it
// calls one expired. A nil or fresh Liveness has seen nothing yet: it finds
// no Lease with a holder expired.
//
// It is safe for concurrent use.
type Liveness struct {
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu    sync.Mutex
	seen  map[string]sighting // by Lease namespace/name
	since time.Time           // sightings count from here at the earliest
}

// sighting is when one version of a Lease was first seen.
type sighting struct {
	version string
	at      time.Time
}

func (v *Liveness) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// leaseVersion is what a renewal changes in a Lease.
func leaseVersion(l *coordinationv1.Lease) string {
	return fmt.Sprintf("%s|%d|%d", *l.Spec.HolderIdentity, l.Spec.RenewTime.UnixNano(), *l.Spec.LeaseDurationSeconds)
}

// Expired reports whether l, as read now, is expired: this process has
// seen this very version of it for at least its duration. A Lease without
// a holder, a renewal time or a duration is expired.
func (v *Liveness) Expired(l *coordinationv1.Lease) bool {
	if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	if v == nil {
		return false
	}
	now := v.now()
	key := l.Namespace + "/" + l.Name
	ver := leaseVersion(l)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = make(map[string]sighting)
	}
	s, ok := v.seen[key]
	if !ok || s.version != ver {
		s = sighting{version: ver, at: now}
		v.seen[key] = s
	}
	from := s.at
	if from.Before(v.since) {
		from = v.since
	}
	return !now.Before(from.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// Resume restarts the count of every Lease from now: called once this
// process reaches the API server again after it could not (its own
// renewals failed), since it saw nothing in between.
func (v *Liveness) Resume() {
	now := v.now()
	v.mu.Lock()
	v.since = now
	v.mu.Unlock()
}

// Keep forgets the Leases not in present (deleted ones), so that the
// sightings do not grow without bound.
func (v *Liveness) Keep(present []coordinationv1.Lease) {
	keep := make(map[string]bool, len(present))
	for i := range present {
		keep[present[i].Namespace+"/"+present[i].Name] = true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for k := range v.seen {
		if !keep[k] {
			delete(v.seen, k)
		}
	}
}
