package reconcile

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// settled reports whether no task can make progress any more on its own
// (the rule --exit-when-done documents): every task is terminal, or
// Pending and waiting for a person: paused before admission (it holds
// nothing), held by a dependency that failed or is missing, or waiting for
// dependencies that are all settled and not all Done. A task paused with a
// batch stopped (phase Paused) is not settled: exiting would kill the
// batch. With WaitForTasks, fewer tasks than that are never settled.
// REQUIRES: owner goroutine.
func (c *Controller) settled() bool {
	if len(c.marked) > 0 {
		return false
	}
	stuck := map[string]bool{} // settled, by task name
	var waiting []*entry       // Pending on dependencies still running
	for _, e := range c.tasks.entries {
		if e.unwritten() || e.resolving != nil {
			return false
		}
		if v1alpha1.IsTerminal(e.status.Phase) {
			stuck[e.name] = true
			continue
		}
		if e.status.Phase != v1alpha1.PhasePending {
			return false
		}
		if adm := meta.FindStatusCondition(e.status.Conditions, v1alpha1.ConditionAdmitted); adm != nil &&
			adm.Status == metav1.ConditionFalse && adm.Reason == v1alpha1.ReasonPaused {
			stuck[e.name] = true
			continue
		}
		cond := meta.FindStatusCondition(e.status.Conditions, v1alpha1.ConditionDependenciesReady)
		switch {
		case cond == nil || cond.Status != metav1.ConditionFalse:
			return false
		case cond.Reason == v1alpha1.ReasonDependencyFailed || cond.Reason == v1alpha1.ReasonDependencyMissing:
			stuck[e.name] = true
		case cond.Reason == v1alpha1.ReasonWaitingForDependencies:
			waiting = append(waiting, e)
		default:
			return false
		}
	}
	// A task waiting only for settled tasks, one of them not Done, is
	// settled too (it waits for a paused one); to a fixed point.
	for changed := true; changed; {
		changed = false
		for _, e := range waiting {
			if stuck[e.name] || !c.waitsOnlyForSettled(e, stuck) {
				continue
			}
			stuck[e.name], changed = true, true
		}
	}
	for _, e := range waiting {
		if !stuck[e.name] {
			return false
		}
	}
	return true
}

// waitsOnlyForSettled reports whether every dependency of e is settled and
// at least one is not Done. REQUIRES: owner goroutine.
func (c *Controller) waitsOnlyForSettled(e *entry, stuck map[string]bool) bool {
	notDone := false
	for _, dep := range e.task.Spec.DependsOn {
		d := c.tasks.named(dep)
		if d == nil || !stuck[dep] {
			return false
		}
		notDone = notDone || d.status.Phase != v1alpha1.PhaseDone
	}
	return notDone
}

func (c *Controller) outcome() Outcome {
	// A manifest the spool refused (root-owned, "chown it") never ran:
	// not Done, as an invalid one is not.
	refused := 0
	if r, ok := c.spool.(refusedCounter); ok {
		refused = r.Refused()
	}
	out := Outcome{AllDone: len(c.tasks.invalid) == 0 && refused == 0, Refused: refused}
	for _, e := range c.tasks.entries {
		t := *e.task
		t.Status = e.status
		out.Tasks = append(out.Tasks, &t)
		if e.status.Phase != v1alpha1.PhaseDone {
			out.AllDone = false
		}
	}
	sort.Slice(out.Tasks, func(i, j int) bool { return out.Tasks[i].Metadata.Name < out.Tasks[j].Metadata.Name })
	return out
}

// phasesEvery bounds how often the phase gauge is recounted (a count is
// a pass over every task, and writes land thousands of times a second).
const phasesEvery = 250 * time.Millisecond

// countPhases recounts the tasks per phase for the gauge, when a phase
// changed or an entry came or went since the last count, at most every
// phasesEvery; always when force. (Walking ten thousand entries every 2 s
// took a tenth of an idle controller's CPU.)
func (c *Controller) countPhases(now time.Time, force bool) {
	if !force && (!c.tasks.stale || now.Sub(c.phasesAt) < phasesEvery) {
		return
	}
	c.phasesAt, c.tasks.stale = now, false
	counts := make(map[v1alpha1.Phase]int)
	for _, e := range c.tasks.entries {
		counts[e.status.Phase]++
	}
	c.metrics.SetPhases(counts)
}

// refusedCounter is a Spool that says how many manifests it ignores with
// a reason (*spool.Spool is one).
type refusedCounter interface {
	Refused() int
}

// unsettledCounter is a Spool that says how many files it waits on before
// it can say what they hold (*spool.Spool is one).
type unsettledCounter interface {
	Unsettled() int
}

// filesSettled reports whether the spool waits on no file: a manifest
// still being written (a slow download) is not an empty spool, and
// --exit-when-done waits for it. REQUIRES: owner goroutine.
func (c *Controller) filesSettled() bool {
	u, ok := c.spool.(unsettledCounter)
	return !ok || u.Unsettled() == 0
}
