package reconcile

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// handleFile applies one spool event. REQUIRES: owner goroutine.
func (c *Controller) handleFile(ev spool.Event) {
	c.index.fileSeen(ev)
	switch ev.Type {
	case spool.Renamed:
		// The task moves with its file (batch, reservation and all); what
		// the new file holds is then applied as an edit.
		c.moveEntry(ev.OldPath, ev.Path)
	case spool.Deleted:
		delete(c.tasks.invalid, ev.Path)
		c.deleteEntry(ev.Path, "manifest deleted")
		return
	case spool.Invalid, spool.Refused:
		if _, known := c.tasks.invalid[ev.Path]; !known {
			c.log.Warn().Str("file", ev.Path).Err(ev.Err).Msg("manifest ignored")
		}
		c.tasks.invalid[ev.Path] = ev.Err
		if ev.Type == spool.Refused {
			c.deleteEntry(ev.Path, "manifest refused")
		}
		// A known task whose file was broken by an edit keeps running: the
		// file is never rewritten and is picked up again once fixed.
		return
	}
	delete(c.tasks.invalid, ev.Path)
	if ev.Task == nil {
		return
	}
	name := ev.Task.Metadata.Name
	e := c.tasks.entries[ev.Path]
	if e != nil && e.name != name {
		c.deleteEntry(ev.Path, "metadata.name changed")
		e = nil
	}
	if owner, taken := c.tasks.byName[name]; taken && owner != ev.Path {
		c.rejectDuplicate(ev, owner)
		return
	}
	if e == nil || e.fileHash != v1alpha1.SpecHash(ev.Task.Spec) {
		c.logWarnings(name, ev.Path, ev.Task)
	}
	if e == nil {
		e = &entry{path: ev.Path, name: name, status: ev.Task.Status}
		c.tasks.put(ev.Path, e)
		c.tasks.byName[name] = ev.Path
		c.host.seenSeq(e.status.QueueSeq)
		e.owner = c.runAs
		c.first(e, ev.Task, ev.Err)
		return
	}
	e.owner = c.runAs
	c.edit(e, ev.Task, ev.Err)
}

// moveEntry moves the task of the manifest at from to the path to (a
// rename), and schedules a status write there. REQUIRES: owner goroutine.
func (c *Controller) moveEntry(from, to string) {
	delete(c.tasks.invalid, from)
	e := c.tasks.entries[from]
	if e == nil {
		return
	}
	if d := c.tasks.entries[to]; d != nil {
		// The file moved onto one of the same task name (the spool emits no
		// deletion for it): of the two, the owner's task goes on.
		switch {
		case d.duplicateOf == from:
			c.dropEntry(to) // the duplicate's file is gone
		case e.duplicateOf == to:
			c.dropEntry(from) // the owner's file holds the duplicate's text now: an edit
			return
		default:
			return
		}
	}
	c.dropEntry(from)
	e.path = to
	e.firstVersion, e.version, e.written, e.marked = 0, 0, 0, false
	c.tasks.put(to, e)
	if c.tasks.byName[e.name] == from {
		c.tasks.byName[e.name] = to
	}
	c.tasks.moved(from, to)
	c.log.Info().Str("task", e.name).Str("from", filepath.Base(from)).Str("to", filepath.Base(to)).Msg("manifest renamed")
	c.markDirty(e, true)
}

// dropEntry forgets the entry at path and its pending writes.
func (c *Controller) dropEntry(path string) {
	c.tasks.drop(path)
	c.forgetWrites(path)
}

// first handles a manifest seen for the first time by this controller: a new
// task, or one a previous controller left (resume from committed progress).
func (c *Controller) first(e *entry, t *v1alpha1.Task, parseErr error) {
	hash := v1alpha1.SpecHash(t.Spec)
	c.tasks.setTask(e, t)
	e.fileHash, e.parseErr = hash, parseErr
	st := &e.status
	if st.TaskName != "" && st.TaskName != e.name {
		// A copy of another task's manifest (or its name edited): the
		// status is that task's, not this one's progress.
		c.log.Warn().Str("task", e.name).Str("statusOf", st.TaskName).Msg("the status in the file was written for another task; starting from nothing")
		*st = v1alpha1.TaskStatus{}
		c.markDirty(e, true)
	}
	if st.CreationTime == nil && !v1alpha1.IsTerminal(st.Phase) {
		// First read as this task (or written by a controller that did
		// not record it: then its first run is the best word on its age).
		// A finished task is left as it is: its file is not rewritten
		// for it, and its age counts from its start.
		created := metav1.Now()
		if st.StartTime != nil && st.StartTime.Before(&created) {
			created = *st.StartTime
		}
		st.CreationTime = &created // written with the next status, not for itself
	}
	if st.ProcessGroup != nil {
		// The group was killed at start (killLeftovers) from the state file.
		st.ProcessGroup = nil
		c.markDirty(e, true)
	}
	act, dropCarry := decideFile(fileFacts{status: st, specHash: hash, invalid: parseErr != nil})
	switch act {
	case rejectSpec:
		c.reject(e, hash, st.ObservedGeneration+1, parseErr)
		return
	case resumeGeneration, finishedGeneration:
		e.appliedHash = hash
		if st.Reservation != nil {
			st.Reservation = nil // reservations die with the controller
			c.markDirty(e, true)
		}
		if act == finishedGeneration {
			c.enqueueFinished(e)
			return
		}
		c.resume(e)
		return
	}
	if dropCarry {
		st.Progress.InputsHash = ""
	}
	c.nextGeneration(e, "")
}

// edit handles a change of a known manifest. spec.paused is not part of
// the spec hash: it applies at once, whatever the phase.
func (c *Controller) edit(e *entry, t *v1alpha1.Task, parseErr error) {
	hash := v1alpha1.SpecHash(t.Spec)
	old := e.task
	c.tasks.setTask(e, t)
	e.fileHash, e.parseErr = hash, parseErr
	if !v1alpha1.SameStatus(&t.Status, &e.status) {
		// The new version dropped or changed the status block (a writer
		// that replaced the whole file): the controller's is put back, so
		// that a restart finds what this controller knows.
		c.markDirty(e, true)
	}
	if e.inQueue && parseErr == nil && old.Spec.Paused != t.Spec.Paused {
		_ = c.queue.SetPaused(e.name, t.Spec.Paused)
		c.log.Info().Str("task", e.name).Bool("paused", t.Spec.Paused).Msg("pause changed")
	}
	e.restart = parseErr == nil && old != nil && t.Spec.RestartToken != old.Spec.RestartToken
	if act, _ := decideFile(c.facts(e, false)); act == keepGeneration {
		if e.restart {
			c.log.Info().Str("task", e.name).Msg("restart asked with no edit waiting: nothing to apply")
			e.restart = false
		}
		c.clearSpecPending(e)
		return
	}
	c.applyEdit(e)
}

// facts is what decideFile needs of a known entry; held asks the queue.
func (c *Controller) facts(e *entry, askHeld bool) fileFacts {
	return fileFacts{
		known: true, status: &e.status, specHash: e.fileHash, appliedHash: e.appliedHash,
		invalid: e.parseErr != nil,
		held:    askHeld && e.inQueue && c.queue.Holds(e.name),
		// The request stands until the next generation starts.
		restartRequested: e.restart,
	}
}

// editWaits is the message of an edit that waits for its task's worker.
const editWaits = "the spec was edited while the task runs; only spec.paused applies now, the rest becomes the next generation once this one ends"

// applyEdit makes the file's spec the next generation when the queue lets
// it (the task holds no worker), else reports it pending under
// SpecApplied=False; the end of the current generation calls it again.
//
// A restart asked for (restartGeneration) starts the edit at once: the
// queue cancels the generation in flight as it takes the next one
// (startGeneration), so no worker needs to end first.
func (c *Controller) applyEdit(e *entry) {
	switch act, _ := decideFile(c.facts(e, true)); act {
	case awaitWorker:
		msg := editWaits
		if e.parseErr != nil {
			msg = "the edited spec is invalid and is not applied: " + e.parseErr.Error()
		}
		e.restart = false
		c.specPending(e, msg)
		return
	case restartGeneration:
		c.log.Info().Str("task", e.name).Int64("generation", e.status.ObservedGeneration).Msg("restart: cancelling the generation in flight for the waiting edit")
		c.nextGeneration(e, "")
		return
	}
	// No worker holds the task: the last events of its generation were
	// pushed before Holds answered. Apply them first (which may apply this
	// very edit), so the generation's end is recorded before the next one.
	c.applyInbox()
	if !e.editPending() || !c.tasks.current(e) {
		return
	}
	switch act, _ := decideFile(c.facts(e, false)); act {
	case rejectSpec:
		c.reject(e, e.fileHash, e.status.ObservedGeneration+1, e.parseErr)
	case startGeneration:
		c.nextGeneration(e, "")
	}
}

// specPending records that the file holds a spec the task cannot take yet.
func (c *Controller) specPending(e *entry, msg string) {
	c.setCondition(e, v1alpha1.ConditionSpecApplied, metav1.ConditionFalse, v1alpha1.ReasonSpecChangePending, msg)
	c.markDirty(e, true)
}

// nextGeneration makes the spec in e.task the next generation once the
// resolver has its items (startGeneration); a request for that spec
// already on its way is not made again. cause, when set, says why a task
// whose spec did not change runs again (a dependency ran again).
// REQUIRES: owner goroutine.
func (c *Controller) nextGeneration(e *entry, cause string) {
	if r := e.resolving; r != nil && r.use == forGeneration && r.hash == e.fileHash && r.cause == cause {
		return
	}
	c.requestItems(e, forGeneration, cause)
}

// startGeneration starts the spec in e.task as generation
// observedGeneration+1 on the items r resolved, whole or not at all: the
// batch adapter learns the new command and items under the new generation
// only, the queue takes the task in one Replace, and only then does the
// status change. It returns false, changing nothing, when the queue still
// runs the current generation.
//
// Committed progress carries over as carriedProgress says; the queue
// applies that rule to its own account, which may be ahead of the events
// applied here.
func (c *Controller) startGeneration(e *entry, cause string, r itemsResolved) bool {
	t, st := e.task, &e.status
	gen := st.ObservedGeneration + 1
	if r.err != nil {
		if e.inQueue && c.queue.Holds(e.name) {
			return false
		}
		if errors.Is(r.err, v1alpha1.ErrNoItems) && c.deferItems(e) {
			return true
		}
		c.reject(e, e.fileHash, gen, fmt.Errorf("spec.items: %w", r.err))
		return true
	}
	e.itemsDeferred = false
	total := r.items.Len()
	inputs := v1alpha1.InputsHash(t.Spec)
	seq := st.QueueSeq
	if seq == 0 {
		seq = c.host.nextSeq()
	}
	if _, err := c.priorityOf(&t.Spec); err != nil {
		if e.inQueue && c.queue.Holds(e.name) {
			return false
		}
		c.reject(e, e.fileHash, gen, err)
		return true
	}
	ri := r.ri
	qt := c.queueTask(e, seq, gen, total)
	qt.InputBytesPerItem = ri.inputPerItem
	var carry bool
	qt.ItemsDone, qt.BatchesDone, carry = carriedProgress(st.Progress, st.Phase, inputs, total)
	// The queue's account, when it has one, wins over this status.
	qt.CarryProgress = carry && e.inQueue
	// A restart cancels the generation a worker holds (else it waits).
	qt.Restart = e.restart
	c.batches.set(e.name, gen, ri)
	c.batches.noteCommitted(e.name, gen, qt.ItemsDone) // carried from the status
	rep, err := c.queue.Replace(qt)
	if err != nil {
		c.batches.drop(e.name, gen)
		if errors.Is(err, queue.ErrSpecPending) {
			return false
		}
		c.log.Warn().Str("task", e.name).Err(err).Msg("the queue did not take the task")
		return true
	}
	c.batches.keepOnly(e.name, gen)
	prevPhase := st.Phase
	if rep.Existed {
		prevPhase = rep.Phase
	}
	restarted := e.restart && rep.Existed && !v1alpha1.IsTerminal(rep.Phase) && rep.Phase != v1alpha1.PhasePending
	e.restart = false
	kept := rep.ItemsDone > 0
	if lb := st.LastBatch; restarted && kept && lb != nil && lb.EndTime == nil {
		// The batch in flight was cancelled: it ends here, uncommitted.
		end := metav1.Now()
		lb.EndTime, lb.Reason, lb.ExitCode, lb.ItemsReported = &end, runner.ReasonCancelled, nil, nil
	}
	st.ObservedGeneration, st.SpecHash, st.TaskName, st.QueueSeq, st.LogFile = gen, e.fileHash, e.name, seq, ri.logPath
	st.Progress = v1alpha1.Progress{ItemsTotal: total, ItemsDone: rep.ItemsDone, BatchesDone: rep.BatchesDone, InputsHash: inputs}
	if !kept {
		st.LastBatch, st.StartTime = nil, nil
	}
	st.CompletionTime, st.Reservation, st.ProcessGroup = nil, nil, nil
	st.Conditions = nil
	e.appliedHash, e.inQueue = e.fileHash, true
	if cause != "" {
		c.setCondition(e, v1alpha1.ConditionRerun, metav1.ConditionTrue, v1alpha1.ReasonDependencyRerun, cause)
	}
	fresh := prevPhase == "" && !e.everWritten && cause == ""
	msg := fmt.Sprintf("queued as generation %d", gen)
	if restarted {
		msg = fmt.Sprintf("restarted: generation %d cancelled, queued as generation %d from %d committed items", gen-1, gen, rep.ItemsDone)
	}
	c.setPhase(e, v1alpha1.PhasePending, "Queued", msg)
	c.markDirty(e, true)
	if fresh {
		// Only queued: written with its first phase change, or once
		// QueuedWriteDelay has passed.
		e.urgent, e.requeued, e.queuedUntil = false, true, time.Now().Add(c.cfg.QueuedWriteDelay)
	}
	if prevPhase == v1alpha1.PhaseDone {
		c.rerunDependents(e)
	}
	return true
}

// rerunDependents starts a new generation of every Done task that depends
// on e, which runs again: a pipeline never mixes the outputs of two
// generations (as make would rebuild what depends on a changed rule). The
// dependents wait for e as any dependent does.
func (c *Controller) rerunDependents(e *entry) {
	cause := fmt.Sprintf("dependency %s runs again as generation %d; re-running on its new outputs", e.name, e.status.ObservedGeneration)
	for _, d := range c.tasks.dependentsOf(e.name) {
		if d.status.Phase == v1alpha1.PhaseDone && d.parseErr == nil && d.duplicateOf == "" {
			c.log.Info().Str("task", d.name).Str("dependency", e.name).Msg("re-running after its dependency")
			c.nextGeneration(d, cause)
		}
	}
}

// deferItems keeps a task whose glob matches nothing yet out of the
// queue while one of its dependencies is not Done: the files it globs
// are often what those make (a features step over the images an import
// step copies). It waits Pending, saying so under DependenciesReady, and
// its items are resolved again each time a dependency ends Done
// (resolveDeferred); once every dependency is Done, a glob that still
// matches nothing rejects it. It reports whether it deferred.
func (c *Controller) deferItems(e *entry) bool {
	var waiting []string
	for _, dep := range e.task.Spec.DependsOn {
		if d := c.tasks.named(dep); d == nil || d.status.Phase != v1alpha1.PhaseDone {
			waiting = append(waiting, dep)
		}
	}
	if len(waiting) == 0 {
		return false
	}
	if e.inQueue {
		_ = c.queue.Remove(e.name)
		e.inQueue = false
	}
	e.itemsDeferred, e.appliedHash = true, e.fileHash
	msg := fmt.Sprintf("items.glob matches nothing yet: it is resolved once %s %s Done", strings.Join(waiting, ", "), map[bool]string{true: "is", false: "are"}[len(waiting) == 1])
	c.setCondition(e, v1alpha1.ConditionDependenciesReady, metav1.ConditionFalse, v1alpha1.ReasonWaitingForDependencies, msg)
	c.leaveActivePhase(e, v1alpha1.ReasonWaitingForDependencies, msg)
	c.setPhase(e, v1alpha1.PhasePending, v1alpha1.ReasonWaitingForDependencies, msg)
	return true
}

// resolveDeferred resolves again the items of the tasks that wait for
// name's outputs (deferItems), name having ended Done.
func (c *Controller) resolveDeferred(name string) {
	for _, d := range c.tasks.dependentsOf(name) {
		if d.itemsDeferred && d.parseErr == nil && d.duplicateOf == "" {
			c.nextGeneration(d, "")
		}
	}
}

// queueTask is what the queue holds of e's spec at generation gen.
func (c *Controller) queueTask(e *entry, seq, gen, total int64) queue.Task {
	t, st := e.task, &e.status
	qt := queue.Task{
		Name:        e.name,
		Seq:         seq,
		Generation:  gen,
		Estimate:    EstimateFor(&t.Spec, max(total, 1)),
		ItemsTotal:  total,
		ItemsDone:   st.Progress.ItemsDone,
		BatchesDone: st.Progress.BatchesDone,
		DependsOn:   t.Spec.DependsOn,
		Paused:      t.Spec.Paused,
		Retries:     int(t.Spec.Retries),
		Mode:        t.Spec.Resources.EffectiveEstimate(),
		Profile:     ProfileOf(&t.Spec),
		Account:     c.account,
	}
	// A class the configuration no longer names (a resumed task) takes
	// the default; a new generation naming one is rejected before.
	qt.Priority, _ = c.priorityOf(&t.Spec)
	if t.Spec.BatchTimeout != nil {
		qt.BatchTimeout = t.Spec.BatchTimeout.Duration
	}
	return qt
}

// resume hands the queue an unfinished task a previous controller left, at
// the generation its status describes, from its committed progress, once
// the resolver has its items (resumeWith). REQUIRES: owner goroutine.
func (c *Controller) resume(e *entry) { c.requestItems(e, forResume, "") }

// resumeWith resumes e on the items r resolved. A task resumed unchanged
// is not rewritten.
func (c *Controller) resumeWith(e *entry, r itemsResolved) {
	t, st := e.task, &e.status
	if r.err != nil {
		c.reject(e, e.appliedHash, st.ObservedGeneration, fmt.Errorf("spec.items: %w", r.err))
		return
	}
	total := r.items.Len()
	before := st.Progress
	progress, startOver := resumedProgress(st.Progress, v1alpha1.InputsHash(t.Spec), total)
	if startOver && before.ItemsTotal != 0 {
		c.log.Warn().Str("task", e.name).Int64("was", before.ItemsTotal).Int64("now", total).Msg("the items changed since the last run; starting over")
	}
	st.Progress = progress
	stale := false
	if lb := st.LastBatch; lb != nil && lb.EndTime == nil && lb.ItemsReported != nil {
		// What a batch of a dead controller reported: that batch is gone.
		lb.ItemsReported, stale = nil, true
	}
	if st.QueueSeq == 0 {
		st.QueueSeq = c.host.nextSeq()
	}
	ri := r.ri
	c.batches.set(e.name, st.ObservedGeneration, ri)
	c.batches.noteCommitted(e.name, st.ObservedGeneration, st.Progress.ItemsDone)
	qt := c.queueTask(e, st.QueueSeq, st.ObservedGeneration, total)
	qt.InputBytesPerItem = ri.inputPerItem
	if _, err := c.queue.Replace(qt); err != nil {
		c.batches.drop(e.name, st.ObservedGeneration)
		c.log.Warn().Str("task", e.name).Err(err).Msg("the queue did not take the task")
		return
	}
	e.inQueue = true
	if st.LogFile != ri.logPath || st.TaskName != e.name || st.Progress != before || stale {
		st.LogFile, st.TaskName = ri.logPath, e.name
		c.markDirty(e, true)
	}
	if st.Phase != v1alpha1.PhasePending {
		c.setPhase(e, v1alpha1.PhasePending, "Resumed", fmt.Sprintf("resumed at generation %d from %d committed items", st.ObservedGeneration, st.Progress.ItemsDone))
	}
}

// enqueueFinished hands the queue a task a previous controller finished, so
// that its dependents can be resolved. Nothing of its status changes (but
// a status.logFile that is not where this controller keeps the log) and its
// items are not resolved again: its inputs may be gone, and a restart on a
// spool of finished manifests must not rewrite them. A Done task one of
// whose dependencies is known and not Done (it was re-run, and the re-run
// of this one was not written before a crash) runs again.
func (c *Controller) enqueueFinished(e *entry) {
	st := &e.status
	qt := c.queueTask(e, st.QueueSeq, st.ObservedGeneration, st.Progress.ItemsTotal)
	qt.Terminal = st.Phase
	c.keepReofferable(e, &qt)
	if _, err := c.queue.Replace(qt); err != nil {
		c.log.Warn().Str("task", e.name).Err(err).Msg("the queue did not take the task")
		return
	}
	e.inQueue = true
	// A status.logFile that is not where this controller keeps the log
	// (written by hand, or by a controller of another state directory)
	// is put right: no reader obeys it (TaskLogPath), people read it.
	if lf := TaskLogPath(c.cfg.StateDir, e.name); st.LogFile != "" && st.LogFile != lf {
		st.LogFile = lf
		c.markDirty(e, false)
	}
	if st.Phase == v1alpha1.PhaseDone {
		c.resolveDeferred(e.name)
		for _, dep := range e.task.Spec.DependsOn {
			if d := c.tasks.named(dep); d != nil && d.duplicateOf == "" && d.status.Phase != v1alpha1.PhaseDone {
				c.nextGeneration(e, fmt.Sprintf("dependency %s is %s at generation %d; re-running after it", dep, d.status.Phase, d.status.ObservedGeneration))
				return
			}
		}
	}
	// Dependents seen before this task and left Done on an older
	// generation of it are handled by their own enqueueFinished, or here
	// when this task is not Done.
	if st.Phase != v1alpha1.PhaseDone {
		for _, d := range c.tasks.dependentsOf(e.name) {
			if d.status.Phase == v1alpha1.PhaseDone && d.parseErr == nil && d.duplicateOf == "" {
				c.nextGeneration(d, fmt.Sprintf("dependency %s is %s at generation %d; re-running after it", e.name, st.Phase, st.ObservedGeneration))
			}
		}
	}
}

// reject marks e Rejected for an invalid spec and takes it out of the queue.
// A Done task rejected by an edit no longer stands for its outputs: its
// Done dependents run again (and wait on it).
func (c *Controller) reject(e *entry, hash string, gen int64, err error) {
	e.resolving = nil // what was asked for this task is moot
	if e.inQueue {
		_ = c.queue.Remove(e.name)
		e.inQueue = false
	}
	c.batches.forget(e.name)
	wasDone := e.status.Phase == v1alpha1.PhaseDone
	e.appliedHash = hash
	st := &e.status
	if st.ObservedGeneration != gen {
		st.Conditions = nil // those of the generation this one replaces
	}
	st.SpecHash, st.ObservedGeneration, st.TaskName = hash, gen, e.name
	st.Reservation = nil
	c.setCondition(e, v1alpha1.ConditionValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, err.Error())
	c.leaveActivePhase(e, v1alpha1.ReasonInvalidSpec, err.Error())
	c.setPhase(e, v1alpha1.PhaseRejected, v1alpha1.ReasonInvalidSpec, err.Error())
	if wasDone {
		c.rerunDependents(e)
	}
}

// rejectDuplicate rejects a second manifest that uses a name already taken.
func (c *Controller) rejectDuplicate(ev spool.Event, owner string) {
	e := c.tasks.entries[ev.Path]
	if e == nil {
		e = &entry{path: ev.Path, name: ev.Task.Metadata.Name, status: ev.Task.Status}
		c.tasks.put(ev.Path, e)
	}
	c.tasks.setTask(e, ev.Task)
	e.duplicateOf = owner
	msg := fmt.Sprintf("metadata.name %q is already used by %s", e.name, filepath.Base(owner))
	e.status.SpecHash = v1alpha1.SpecHash(ev.Task.Spec)
	c.setCondition(e, v1alpha1.ConditionValid, metav1.ConditionFalse, v1alpha1.ReasonDuplicateName, msg)
	c.leaveActivePhase(e, v1alpha1.ReasonDuplicateName, msg)
	c.setPhase(e, v1alpha1.PhaseRejected, v1alpha1.ReasonDuplicateName, msg)
}

// leaveActivePhase moves e to Pending when its phase is one no worker of
// this controller stands behind (Reserved, Running or Paused, read from a
// file a crashed controller left or copied from another task's) and cannot
// go to Rejected directly (the phase table).
func (c *Controller) leaveActivePhase(e *entry, reason, message string) {
	if !v1alpha1.AllowedTransition(e.status.Phase, v1alpha1.PhaseRejected) {
		c.setPhase(e, v1alpha1.PhasePending, reason, message)
	}
}

// deleteEntry forgets the manifest at path, cancelling its task.
func (c *Controller) deleteEntry(path, why string) {
	e := c.tasks.entries[path]
	if e == nil {
		return
	}
	c.dropEntry(path)
	if e.duplicateOf != "" {
		return
	}
	delete(c.tasks.byName, e.name)
	if e.inQueue {
		_ = c.queue.Remove(e.name)
	}
	c.batches.forget(e.name)
	c.log.Info().Str("task", e.name).Str("reason", why).Msg("task cancelled")
	// A duplicate waiting for this name can now take it.
	if d := c.tasks.duplicateWaiting(path, e.name); d != nil {
		c.dropEntry(d.path)
		c.handleFile(spool.Event{Type: spool.Modified, Path: d.path, Name: d.name, Task: d.task})
	}
}
