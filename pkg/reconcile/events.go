package reconcile

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// applyInbox applies every note pushed so far, oldest first.
// REQUIRES: owner goroutine.
func (c *Controller) applyInbox() {
	for {
		x, ok := c.inbox.pop()
		if !ok {
			if len(c.pendingHistory) >= historyBatchMax || time.Since(c.historyAt) >= historyInterval {
				c.flushHistory()
			}
			return
		}
		c.handleNote(x)
	}
}

// handleNote applies a note from the inbox. REQUIRES: owner goroutine.
func (c *Controller) handleNote(x any) {
	switch n := x.(type) {
	case queue.Event:
		c.applyQueueEvent(n)
	case writeOutcome:
		c.takeOutcome(n)
	case itemsResolved:
		c.takeItems(n)
	case listedMark:
		c.host.noteListed(c.idx)
	case leaveNote:
		c.takeLeave(n)
	case history.Entry:
		c.pendingHistory = append(c.pendingHistory, n)
	case groupNote:
		if e := c.tasks.named(n.task); e != nil {
			e.status.ProcessGroup = &v1alpha1.ProcessGroupRef{PGID: n.group.PGID, StartTicks: n.group.StartTicks}
			if n.group.Cgroup != nil {
				e.status.ProcessGroup.Cgroup = n.group.Cgroup.Main()
			}
			c.markDirty(e, false)
		}
	case progressNote:
		e := c.tasks.named(n.task)
		if e == nil || !e.inQueue || n.generation != e.status.ObservedGeneration {
			return
		}
		// Only the batch the status shows as running; a note that
		// arrives after its batch ended is stale.
		if lb := e.status.LastBatch; lb != nil && lb.Index == n.index && lb.EndTime == nil {
			items := n.items
			lb.ItemsReported = &items
			c.markDirty(e, false)
		}
	}
}

// applyQueueEvent writes a queue event into the task's status
// (projectEvent), moves its phase, and starts the edit that waited for
// its generation to end.
func (c *Controller) applyQueueEvent(ev queue.Event) {
	e := c.tasks.named(ev.Task)
	if e == nil || !e.inQueue || ev.Generation != e.status.ObservedGeneration {
		return // a generation this controller no longer applies
	}
	strict := e.task.Spec.Resources.EffectiveEstimate() == v1alpha1.EstimateStrict
	p := projectEvent(&e.status, ev, strict, advisor{c, e})
	if p.waitLog {
		c.log.Info().Str("task", e.name).Str("reason", ev.Reason).Msg("waiting: " + ev.Message)
	}
	if r := p.batchEnded; r != nil {
		c.metrics.ObserveBatch(string(e.task.Spec.Class), r.Ended.Sub(r.Started), r.PeakMemoryBytes)
	}
	switch p.write {
	case writeSoon:
		c.markDirty(e, false)
	case writeNumbers:
		if now := time.Now(); waitNumbersDue(e.waitNumbersAt, now) {
			e.waitNumbersAt = now
			c.markDirty(e, false)
		}
	case writeNewWait:
		// The first reason a task waits is worth a write at once, but
		// for the reasons every queued task passes through.
		c.markDirty(e, !e.everWritten && !(!e.queuedUntil.IsZero() && passingWait(ev.Reason)))
	case writeCommit:
		c.markDirty(e, true)
		e.commit = true
	}
	if p.toPhase != "" {
		c.setPhase(e, p.toPhase, p.reason, p.message)
	}
	if ev.Type == queue.EventPhase && (ev.Phase == v1alpha1.PhaseDone || ev.Phase == v1alpha1.PhaseFailed) {
		// No batch of this generation runs again (a retry or an edit is
		// a new generation, resolved anew): its items and command go. A
		// Rejected one stays: the queue offers it again when the
		// hardware changes.
		c.batches.drop(e.name, ev.Generation)
	}
	if ev.Type == queue.EventPhase && ev.Phase == v1alpha1.PhaseDone {
		c.resolveDeferred(e.name)
		// Every batch succeeded: what failed attempts kept is obsolete.
		c.batches.removeItemsFiles(e.name)
	}
	if ev.Type == queue.EventPhase && v1alpha1.IsTerminal(ev.Phase) && e.editPending() {
		// An edit waited for this generation to end, Done included: it is
		// the next generation now.
		c.applyEdit(e)
	}
}

// setPhase moves e to phase, logging the transition and scheduling a write.
// It is the only place a status phase changes, and it refuses what
// v1alpha1.AllowedTransition forbids: that is a bug, logged as an error and
// counted (lardon3d_phase_transitions_refused_total).
func (c *Controller) setPhase(e *entry, phase v1alpha1.Phase, reason, message string) {
	if e.status.Phase == phase {
		c.markDirty(e, false)
		return
	}
	from := e.status.Phase
	if err := e.status.SetPhase(phase); err != nil {
		c.metrics.ObservePhaseRefused(from, phase)
		c.log.Error().Str("task", e.name).Str("from", string(from)).Str("phase", string(phase)).Str("reason", reason).Msg("BUG: forbidden phase transition refused: " + message)
		return
	}
	c.tasks.stale = true
	c.log.Info().Str("task", e.name).Str("from", string(from)).Str("phase", string(phase)).Str("reason", reason).Msg(message)
	c.markDirty(e, true)
}

// setCondition sets a condition and schedules a write when anything
// changed; it reports whether anything did.
func (c *Controller) setCondition(e *entry, typ string, status metav1.ConditionStatus, reason, message string) bool {
	changed := e.status.SetCondition(typ, status, reason, message)
	if changed {
		c.markDirty(e, false)
	}
	return changed
}

func (c *Controller) clearSpecPending(e *entry) {
	if meta.RemoveStatusCondition(&e.status.Conditions, v1alpha1.ConditionSpecApplied) {
		c.markDirty(e, true)
	}
}

// markDirty schedules a status write: urgent ones (phase changes, batch
// commits) within PhaseWriteDelay, the rest within ProgressInterval. The
// status is handed to the writer at the end of the pass (handWrites),
// once the event that changed it is applied whole.
func (c *Controller) markDirty(e *entry, urgent bool) {
	if !c.tasks.current(e) {
		return
	}
	if !e.marked {
		e.marked = true
		c.marked = append(c.marked, e)
	}
	e.urgent = e.urgent || urgent
}

// handWrites hands the writer a copy of every status marked since the
// last hand-off; it never blocks. REQUIRES: owner goroutine.
func (c *Controller) handWrites() {
	if len(c.marked) == 0 {
		return
	}
	now := time.Now()
	rs := make([]writeRequest, 0, len(c.marked))
	for _, e := range c.marked {
		if !e.marked || !c.tasks.current(e) {
			continue
		}
		c.writeSeq++
		e.version = c.writeSeq
		if e.firstVersion == 0 {
			e.firstVersion = e.version
		}
		r := writeRequest{path: e.path, name: e.name, version: e.version, status: e.status.DeepCopy(), urgent: e.urgent, commit: e.commit, at: now}
		if e.requeued && !e.urgent {
			r.queuedUntil = e.queuedUntil
		}
		rs = append(rs, r)
		e.marked, e.urgent, e.commit, e.requeued = false, false, false, false
	}
	clear(c.marked)
	c.marked = c.marked[:0]
	c.writer.submit(rs...)
}

// forgetWrites tells the writer the manifest at path is gone.
func (c *Controller) forgetWrites(path string) {
	c.writer.submit(writeRequest{path: path})
}

// takeOutcome records how the write of one of e's versions ended.
// REQUIRES: owner goroutine.
func (c *Controller) takeOutcome(o writeOutcome) {
	e := c.tasks.entries[o.path]
	if e == nil || o.version < e.firstVersion || o.version > e.version {
		return // another entry's, or one forgotten since
	}
	if o.err == nil {
		e.written = max(e.written, o.version)
		e.everWritten, e.writeErr = true, nil
		e.queuedUntil = time.Time{}
		c.index.wrote(e.path, e.task, o.status)
		c.statusWritten = true
		return
	}
	e.writeErr = o.err
	if errors.Is(o.err, spool.ErrNotRewritable) && !c.closing && !e.everWritten && e.task.Status.Phase == "" {
		// A file whose layout the editor refuses (anchors, several
		// documents) can never hold a status: its progress could not be
		// committed, so it does not run. It is reported like a refused
		// file, and taken again once the user rewrites it. A file that
		// held a status already was broken by an edit (a save half-way,
		// a typo): that is a failed write, retried until the user fixes
		// it, and the task keeps running.
		c.log.Warn().Str("task", e.name).Str("file", e.path).Err(o.err).Msg("manifest ignored: its status cannot be written into it")
		c.tasks.invalid[e.path] = o.err
		c.deleteEntry(e.path, "status cannot be written into the manifest")
	}
}

// advisor gives projectEvent the controller's advice on a task's memory
// estimate.
type advisor struct {
	c *Controller
	e *entry
}

// estimateLowMessage says by how much a killed batch's reservation was
// low, and what to declare instead. REQUIRES: owner goroutine.
func (a advisor) estimateLowMessage(b *queue.Batch, r *queue.BatchResult) string {
	had := b.Contract.MemoryBytes
	used := max(r.PeakMemoryBytes, had)
	msg := fmt.Sprintf("batch %d of %s at %s was killed for memory: %s and it needed more than %s",
		b.Index, governor.Count(b.Size, "item"), governor.Count(int64(b.Contract.Threads), "thread"), a.reservedText(b), governor.FormatBytes(used))
	if had > 0 && used > had {
		msg += fmt.Sprintf(" (%d%% more)", (used-had)*100/had)
	}
	msg += "; retried under the measured need"
	return msg + a.suggestion(b.Size, used)
}

// reservedText says what a batch had reserved and where the amount came
// from, true of a reservation raised above the declaration (the retry of
// a batch killed for memory, or the profile's measured need) as of one
// that is the declaration. REQUIRES: owner goroutine.
func (a advisor) reservedText(b *queue.Batch) string {
	had := governor.FormatBytes(b.Contract.MemoryBytes)
	spec := &a.e.task.Spec
	if spec.Resources.EffectiveEstimate() == v1alpha1.EstimateLearned {
		return "the learned estimate reserved " + had
	}
	declared, _ := declaredBytes(EstimateFor(spec, b.Total), b.Size, b.Contract)
	switch {
	case declared <= 0:
		return "it had " + had + " reserved (no memory declared)"
	case b.Contract.MemoryBytes <= declared:
		return "the declared costs reserved " + had
	case b.Attempt > 1:
		return fmt.Sprintf("it had %s reserved (declared %s, bumped after an earlier kill)", had, governor.FormatBytes(declared))
	}
	return fmt.Sprintf("it had %s reserved (declared %s, raised to the measured need)", had, governor.FormatBytes(declared))
}

// suggestionSep starts the suggestion of an EstimateTooLow message.
const suggestionSep = "; suggested: "

// suggestion is what to declare: the profile's learned block when it has
// one, else the bumped need of a batch killed at used bytes.
func (a advisor) suggestion(size, used int64) string {
	return suggestionText(Suggest(a.c.host.book, ProfileOf(&a.e.task.Spec)), "memory", size, used)
}

// gpuSuggestion is suggestion for GPU memory (SuggestGPU).
func (a advisor) gpuSuggestion(size, used int64) string {
	return suggestionText(SuggestGPU(a.c.host.book, ProfileOf(&a.e.task.Spec)), "gpuMemory", size, used)
}

// suggestionText words a suggestion s of the cost named key, or, without
// one, the bumped need of a batch killed at used bytes.
func suggestionText(s Suggestion, key string, size, used int64) string {
	if s.OK {
		note := "from " + governor.Count(int64(s.Model.Samples), "batch")
		if s.Note != "" {
			note += "; " + s.Note
		}
		return fmt.Sprintf("%s%s (%s)", suggestionSep, resourcesBlock(s.Costs, key), note)
	}
	if used <= 0 {
		return ""
	}
	what := ""
	if key == "gpuMemory" {
		what = " of GPU memory"
	}
	return fmt.Sprintf("%sat least %s%s for a batch of %d", suggestionSep, governor.FormatBytes(history.Params{}.Bump(used)), what, size)
}
