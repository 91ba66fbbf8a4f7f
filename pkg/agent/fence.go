package agent

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// renewalDone records the outcome of a renewal of this node's Lease that
// started at start. The first success after a failure restarts this
// node's count of every other Lease (kube.Liveness.Resume): it saw no
// renewal while it could not reach the API server.
func (s *Source) renewalDone(start time.Time, err error) {
	s.mu.Lock()
	if err != nil {
		s.mu.beatFailed = true
		since := s.mu.renewed
		s.mu.Unlock()
		s.log.Warn().Err(err).Time("lastRenewal", since).Dur("deadline", s.cfg.RenewDeadline).Msg("Lease renewal failed; this node stops its batches if no renewal succeeds before the deadline")
		return
	}
	resumed := s.mu.beatFailed
	s.mu.beatFailed = false
	if start.After(s.mu.renewed) {
		s.mu.renewed = start
	}
	s.mu.Unlock()
	if resumed {
		s.live.Resume()
		s.log.Info().Msg("Lease renewed again; other nodes' Leases are watched for a whole duration again before any takeover")
	}
}

// watchRenewals stops this node's batches once no renewal succeeded for
// the renew deadline, and lets them go on once one did, until ctx ends.
// Its own goroutine: a pass may be blocked on the API server.
func (s *Source) watchRenewals(ctx context.Context) {
	t := time.NewTicker(max(s.cfg.RenewPeriod/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		renewed, fencedAt := s.mu.renewed, s.mu.fencedAt
		s.mu.Unlock()
		switch now := time.Now(); {
		case fencedAt.IsZero() && now.Sub(renewed) > s.cfg.RenewDeadline:
			s.fence(now, renewed)
		case !fencedAt.IsZero() && renewed.After(fencedAt):
			s.unfence(ctx)
		}
	}
}

// fence stops every batch of this node (self-fencing): each task it holds
// is presented to the reconciler paused, which stops its batch and keeps
// its reservation. Nothing is written to the API server, which this node
// cannot reach; the other nodes may take its tasks over LeaseDuration
// after they saw its last renewal, later than this.
func (s *Source) fence(now, renewed time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.fencedAt = now
	for _, h := range s.mu.held {
		ev := s.presentHeld(h, h.presented)
		if ev.Task != nil {
			ev.Task.Spec.Paused = true
		}
		s.push(ev)
	}
	s.log.Warn().Time("lastRenewal", renewed).Dur("deadline", s.cfg.RenewDeadline).Int("tasks", len(s.mu.held)).
		Msg("no Lease renewal within the deadline: this node's batches are stopped (self-fenced) until a renewal succeeds; other nodes may take its tasks over once its Lease expired")
}

// unfence ends the fence once a renewal succeeded: each task held is read
// from the API server; one still held under this node's claim is
// presented as it is there (its own spec.paused), one held under another
// claim now is dropped (its batches are killed). A task that cannot be
// read keeps the fence, tried again at the next tick.
func (s *Source) unfence(ctx context.Context) {
	held := s.heldNow(nil)
	fresh := make(map[string]*kubeapi.Task, len(held))
	for _, c := range held {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.RenewDeadline)
		var t kubeapi.Task
		err := s.client.Get(rctx, ctrlclient.ObjectKeyFromObject(c.obj), &t)
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			s.log.Warn().Str("task", c.path).Err(err).Msg("fenced task not readable; its batches stay stopped")
			return
		}
		if err == nil {
			fresh[c.path] = &t
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range held {
		path, seq := c.path, c.seq
		h := s.mu.held[path]
		if h != c.h {
			continue // dropped or claimed again meanwhile
		}
		t := fresh[path]
		switch {
		case t == nil:
			delete(s.mu.held, path)
			s.push(spool.Event{Type: spool.Deleted, Path: path})
		case !s.claimer.Holds(t, seq):
			s.lockedFence(path, seq, "taken over while this node could not renew its Lease")
		default:
			h.gen, h.presented = t.Generation, t
			s.push(s.presentHeld(h, t))
		}
	}
	s.log.Info().Dur("fenced", time.Since(s.mu.fencedAt).Round(time.Millisecond)).Msg("Lease renewed: the batches of the tasks this node still holds go on")
	for _, h := range s.mu.held {
		s.record(h.obj, taskEvent{corev1.EventTypeWarning, EventSelfFenced, fmt.Sprintf("node %s could not renew its Lease for %v: its batches were stopped, and go on", s.cfg.Node, time.Since(s.mu.fencedAt).Round(time.Second))})
	}
	s.mu.fencedAt = time.Time{}
	signal(s.kick)
}

// haltTakeovers reports whether takeovers from other nodes are halted:
// more than Config.TakeoverHalt of the Leases counted (of a node alive or
// holding a task that has not ended; an expired one holding nothing is a
// node gone for good) are expired at once. It keeps
// s.live's sightings of every Lease current. Run's goroutine only.
func (s *Source) haltTakeovers(tasks []kubeapi.Task, leases []coordinationv1.Lease) bool {
	holding := make(map[string]bool)
	for i := range tasks {
		if cl := tasks[i].Status.Claim; cl != nil && !v1alpha1.IsTerminal(tasks[i].Status.Phase) {
			holding[cl.Node] = true
		}
	}
	counted, expired := 0, 0
	for i := range leases {
		l := &leases[i]
		if l.Spec.HolderIdentity == nil {
			continue
		}
		switch gone := s.live.Expired(l); {
		case !gone:
			counted++
		case holding[*l.Spec.HolderIdentity]:
			counted++
			expired++
		}
	}
	s.live.Keep(leases)
	halt := expired > 0 && float64(expired) > s.cfg.TakeoverHalt*float64(counted)
	if halt != s.halted {
		s.halted = halt
		if halt {
			s.log.Warn().Int("expired", expired).Int("nodes", counted).Float64("haltFraction", s.cfg.TakeoverHalt).
				Msg("most nodes' Leases expired at once: no takeover (the API server or the network is the likely fault, not the nodes)")
		} else {
			s.log.Info().Int("expired", expired).Int("nodes", counted).Msg("takeovers resumed")
		}
	}
	return halt
}
