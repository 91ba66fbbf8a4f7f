package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// Drainer is this machine's queue, as a draining node sees it
// (reconcile.Controller).
type Drainer interface {
	// Drain, on, starts no batch any more and leaves each task at its next
	// batch boundary; Drain(false) dispatches again.
	Drain(on bool)
	// Holds reports whether a worker still holds the task (by its core
	// name): until it does not, the task is not let go.
	Holds(name string) bool
}

// nodeCheckEvery is how often a pass reads this node's Node (cordon,
// taints) from the API server.
const nodeCheckEvery = 2 * time.Second

// UseDrainer gives the source the queue it drains (before Run).
func (s *Source) UseDrainer(d Drainer) { s.drainer = d }

// Leave starts the drain of an agent that stops: it claims nothing more,
// the queue starts no batch, and each task held is let go (Release) once
// its batch in flight ended and its progress is written. Held says how
// many are left; ReleaseAll lets go of those, once the reconciler stopped.
func (s *Source) Leave() {
	s.mu.Lock()
	s.mu.leaving = true
	s.mu.Unlock()
	s.applyDrain()
	signal(s.kick)
}

// Held reports how many tasks this node holds.
func (s *Source) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.held)
}

// draining reports whether this node drains (it stops, or its Node is
// cordoned). REQUIRES: s.mu.
func (s *Source) lockedDraining() bool { return s.mu.leaving || s.mu.cordoned != "" }

// applyDrain tells the queue whether to drain.
func (s *Source) applyDrain() {
	s.mu.Lock()
	on := s.lockedDraining()
	s.mu.Unlock()
	if s.drainer != nil {
		s.drainer.Drain(on)
	}
}

// checkNode reads this node's Node, at most every nodeCheckEvery, and
// drains while it is cordoned or carries a NoSchedule or NoExecute taint
// not in Config.TolerateTaints. A Node that cannot be read (none of that
// name, or no right to read it) drains nothing. Run's goroutine only.
func (s *Source) checkNode(ctx context.Context) {
	if time.Since(s.nodeChecked) < nodeCheckEvery {
		return
	}
	s.nodeChecked = time.Now()
	var n corev1.Node
	why := ""
	gctx, cancel := context.WithTimeout(ctx, nodeCheckEvery)
	err := s.client.Get(gctx, ctrlclient.ObjectKey{Name: s.cfg.Node}, &n)
	cancel()
	switch {
	case err == nil:
		why = s.cordonedBy(&n)
	case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
		if !s.nodeUnreadable {
			s.nodeUnreadable = true
			s.log.Info().Err(err).Msg("this node's Node is not readable: a cordon is not seen")
		}
	default:
		s.log.Debug().Err(err).Msg("reading this node's Node")
		return
	}
	s.mu.Lock()
	was := s.mu.cordoned
	s.mu.cordoned = why
	if err == nil {
		s.mu.nodeLabels = maps.Clone(n.Labels)
		if s.mu.nodeLabels == nil {
			s.mu.nodeLabels = map[string]string{}
		}
	}
	s.mu.Unlock()
	if (was == "") == (why == "") {
		return
	}
	if why != "" {
		s.log.Warn().Str("why", why).Msg("node cordoned: no new claim; each task held is let go at its batch boundary")
	} else {
		s.log.Info().Str("was", was).Msg("node schedulable again: claiming")
	}
	s.applyDrain()
}

// cordonedBy says why n takes no new work ("" when it does).
func (s *Source) cordonedBy(n *corev1.Node) string {
	if n.Spec.Unschedulable {
		return "unschedulable (cordoned)"
	}
	for _, t := range n.Spec.Taints {
		if (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) && !slices.Contains(s.cfg.TolerateTaints, t.Key) {
			return fmt.Sprintf("taint %s:%s", t.Key, t.Effect)
		}
	}
	return ""
}

// releaseDrained lets go of each task held that is at a batch boundary: no
// worker holds it, and the last status written says so (Pending, or
// ended; its progress is on the server). Run's goroutine only.
func (s *Source) releaseDrained(ctx context.Context) {
	atBoundary := func(h *held) bool {
		return h.phase == "" || h.phase == v1alpha1.PhasePending || v1alpha1.IsTerminal(h.phase)
	}
	for _, c := range s.heldNow(atBoundary) {
		if s.drainer != nil && s.drainer.Holds(CoreName(c.obj.Namespace, c.obj.Name)) {
			continue
		}
		s.release(ctx, c)
	}
}

// ReleaseAll lets go of every task still held, once the reconciler
// stopped (its batches ended, its last statuses written).
func (s *Source) ReleaseAll(ctx context.Context) {
	for _, c := range s.heldNow(nil) {
		s.release(ctx, c)
	}
}

// heldCopy is a task held, as read under s.mu: obj is a copy of the last
// version written or claimed.
type heldCopy struct {
	path string
	h    *held
	obj  *kubeapi.Task
	seq  int64
}

// heldNow copies the tasks held that keep accepts (every one when nil).
func (s *Source) heldNow(keep func(*held) bool) []heldCopy {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []heldCopy
	for path, h := range s.mu.held {
		if keep == nil || keep(h) {
			out = append(out, heldCopy{path, h, h.obj.DeepCopy(), h.seq})
		}
	}
	return out
}

// release lets go of the task at path, held as h under claim seq: a
// conditional write (kube.Claimer.Release); the reconciler is told it is
// gone.
func (s *Source) release(ctx context.Context, c heldCopy) {
	path, obj, seq := c.path, c.obj, c.seq
	err := s.claimer.Release(ctx, obj, seq)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case errors.Is(err, kube.ErrFenced):
		s.lockedFence(path, seq, err.Error())
	case err != nil:
		s.log.Warn().Str("task", path).Err(err).Msg("release failed; tried again")
	case s.mu.held[path] == c.h:
		delete(s.mu.held, path)
		s.push(spool.Event{Type: spool.Deleted, Path: path})
		msg := fmt.Sprintf("node %s let it go at a batch boundary (claim %d), %d items committed: any node may claim it", s.cfg.Node, seq, obj.Status.Progress.ItemsDone)
		s.log.Info().Str("task", path).Int64("seq", seq).Int64("itemsDone", obj.Status.Progress.ItemsDone).Msg("released")
		s.record(obj, taskEvent{corev1.EventTypeNormal, EventReleased, msg})
	}
}
