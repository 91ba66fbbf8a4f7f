package reconcile

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// The lifecycle rules, as pure functions of what the controller knows:
// what a newly read version of a manifest asks of its task (decideFile),
// which progress a generation starts from (carriedProgress,
// resumedProgress), and what a queue event makes of a status
// (projectEvent). The controller carries them out (generations.go,
// events.go); lifecycle_rules_test.go checks every rule of the README.

// fileAction is what a version of a manifest asks of its task.
type fileAction int

const (
	// keepGeneration: the spec is the one the task runs (only spec.paused
	// or the status block may have changed).
	keepGeneration fileAction = iota
	// resumeGeneration: first seen, the status describes this spec and
	// did not finish: resume from its committed progress.
	resumeGeneration
	// finishedGeneration: first seen, the status describes this spec and
	// finished: the queue learns its outcome, nothing runs.
	finishedGeneration
	// startGeneration: the spec is the next generation, now.
	startGeneration
	// awaitWorker: a worker holds the task; the edit waits, under
	// SpecApplied=False, for the generation to end.
	awaitWorker
	// rejectSpec: the spec is invalid; the task is Rejected.
	rejectSpec
	// restartGeneration: a worker holds the task and a restart was asked
	// for its waiting edit: the generation in flight is cancelled and the
	// edited spec is the next generation, now.
	restartGeneration
)

func (a fileAction) String() string {
	return [...]string{"keep", "resume", "finished", "start", "await-worker", "reject", "restart"}[a]
}

// fileFacts is what decideFile looks at.
type fileFacts struct {
	// known: the controller had the task before this version (an edit);
	// else it sees the manifest for the first time (a new one, or one a
	// previous controller left).
	known bool
	// status is the task's status: the controller's for a known task,
	// the file's on first sight.
	status *v1alpha1.TaskStatus
	// specHash is this version's spec (v1alpha1.SpecHash); appliedHash
	// the generation the queue runs (known tasks).
	specHash, appliedHash string
	// invalid: this version's spec does not validate.
	invalid bool
	// held: a worker holds the task (queue.Holds): reserved, running,
	// paused, or between two batches.
	held bool
	// restartRequested: this version carries a new spec.restartToken
	// (the restart verb), known tasks only.
	restartRequested bool
}

// decideFile is the edit rule of the README, the same with or without a
// controller restart; a restart asked for (the restart verb) applies a
// valid edit that waits for a worker now. dropCarry says the committed progress must not carry over to
// the next generation (a spec changed while no controller ran, whose
// generation did not end Failed or Rejected: an edit would have waited
// for it to end Done).
func decideFile(f fileFacts) (act fileAction, dropCarry bool) {
	st := f.status
	if !f.known {
		if f.invalid {
			return rejectSpec, false
		}
		// A duplicate-name rejection belongs to the file's situation, not
		// to its spec: the name may be free now.
		dup := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionValid)
		if st.SpecHash == f.specHash && st.Phase != "" && (dup == nil || dup.Reason != v1alpha1.ReasonDuplicateName) {
			if v1alpha1.IsTerminal(st.Phase) {
				return finishedGeneration, false
			}
			return resumeGeneration, false
		}
		return startGeneration, st.Phase != v1alpha1.PhaseFailed && st.Phase != v1alpha1.PhaseRejected
	}
	switch {
	case f.specHash == f.appliedHash && !f.invalid:
		// A restart with no edit waiting changes nothing.
		return keepGeneration, false
	case f.held && f.restartRequested && !f.invalid:
		return restartGeneration, false
	case f.held:
		// An invalid edit waits even when a restart is asked: the
		// generation in flight is not cancelled for a spec that cannot run.
		return awaitWorker, false
	case f.invalid:
		return rejectSpec, false
	}
	return startGeneration, false
}

// carriedProgress is the committed progress a new generation starts
// from, given the previous one's: carried only when the previous
// generation did not end Done and its items and working directory are
// unchanged (inputs, total). carry says the inputs are unchanged (the
// queue's own account of a task it holds then wins over the status).
func carriedProgress(prev v1alpha1.Progress, prevPhase v1alpha1.Phase, inputs string, total int64) (itemsDone, batchesDone int64, carry bool) {
	carry = prev.InputsHash == inputs && prev.ItemsTotal == total
	if carry && prevPhase != v1alpha1.PhaseDone {
		return prev.ItemsDone, prev.BatchesDone, carry
	}
	return 0, 0, carry
}

// resumedProgress is the progress a task resumed at the generation its
// status describes starts from: the status's, unless its items changed
// since (their count, or the inputs), then none (startOver).
func resumedProgress(p v1alpha1.Progress, inputs string, total int64) (v1alpha1.Progress, bool) {
	startOver := p.ItemsTotal != total || p.ItemsDone > total || (p.InputsHash != "" && p.InputsHash != inputs)
	if startOver {
		p = v1alpha1.Progress{ItemsTotal: total}
	}
	p.InputsHash = inputs
	return p, startOver
}

// writeNeed says how soon a change of a status must be written.
type writeNeed int

const (
	// writeNone: nothing changed.
	writeNone writeNeed = iota
	// writeSoon: within ProgressInterval.
	writeSoon
	// writeNumbers: a wait kept its reason, only its message's numbers
	// moved: at most every waitNumbersInterval.
	writeNumbers
	// writeNewWait: a new reason to wait: at once, unless the task was
	// written already or the reason is one every queued task passes
	// through (passingWait).
	writeNewWait
	// writeCommit: the end of a batch, a commit point: at once.
	writeCommit
)

// projection is what a queue event makes of a status beyond the fields
// projectEvent sets: the phase it moves to (toPhase "" for none), how
// soon the status must be written, and what to tell.
type projection struct {
	toPhase         v1alpha1.Phase
	reason, message string
	write           writeNeed
	// waitLog, when set, is a reason the task now waits for (logged once
	// per reason).
	waitLog bool
	// batchEnded is the batch that ended (metrics), nil for other events.
	batchEnded *queue.BatchResult
}

// estimateAdvice says, for a batch killed for memory, by how much its
// reservation was low and what to declare (estimateLowMessage), and
// after a batch that succeeded, the suggestion alone (suggestion); the
// same for GPU memory (gpuSuggestion).
type estimateAdvice interface {
	estimateLowMessage(b *queue.Batch, r *queue.BatchResult) string
	suggestion(size, used int64) string
	gpuSuggestion(size, used int64) string
}

// pausedTime keeps the paused time of the batch in flight lb (nil: none)
// as the task enters phase at now: a pause stops its clock, a resume adds
// the pause to PausedSeconds.
func pausedTime(lb *v1alpha1.BatchRecord, phase v1alpha1.Phase, now metav1.Time) {
	if lb == nil || lb.EndTime != nil {
		return
	}
	switch {
	case phase == v1alpha1.PhasePaused && lb.PausedSince == nil:
		lb.PausedSince = &now
	case phase == v1alpha1.PhaseRunning && lb.PausedSince != nil:
		lb.PausedSeconds += int64(max(0, now.Sub(lb.PausedSince.Time).Seconds()))
		lb.PausedSince = nil
	}
}

// projectEvent applies a queue event of the status's generation to st:
// reservation, conditions, batch record, progress, times. The phase is
// not set here: the projection names it, and the controller's setPhase
// moves it, refusing what v1alpha1.AllowedTransition forbids. strict is
// spec.resources.estimate: strict (a batch killed for memory is not
// retried under a bigger estimate).
func projectEvent(st *v1alpha1.TaskStatus, ev queue.Event, strict bool, advice estimateAdvice) projection {
	now := metav1.NewTime(ev.Time)
	setCond := st.SetCondition
	switch ev.Type {
	case queue.EventPhase:
		switch ev.Phase {
		case v1alpha1.PhaseReserved, v1alpha1.PhaseRunning, v1alpha1.PhasePaused:
			if ev.Contract != nil {
				st.Reservation = ContractStatus(*ev.Contract)
			}
			meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionDependenciesReady)
			setCond(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted, admittedMessage(ev))
			if ev.Phase == v1alpha1.PhaseRunning && st.StartTime == nil {
				st.StartTime = &now
			}
			pausedTime(st.LastBatch, ev.Phase, now)
		case v1alpha1.PhasePending:
			st.Reservation = nil
			reoffered(st)
			if ev.Reason != "" {
				// Back from Reserved or Running: no longer admitted, and
				// the condition says why (a wait, a batch that could not
				// be prepared, a shutdown).
				typ := v1alpha1.ConditionAdmitted
				if v1alpha1.WaitsOnDependencies(ev.Reason) {
					typ = v1alpha1.ConditionDependenciesReady
				}
				setCond(typ, metav1.ConditionFalse, ev.Reason, ev.Message)
			}
		case v1alpha1.PhaseDone:
			st.Reservation, st.ProcessGroup = nil, nil
			st.CompletionTime = &now
			setCond(v1alpha1.ConditionComplete, metav1.ConditionTrue, v1alpha1.ReasonCompleted, ev.Message)
		case v1alpha1.PhaseFailed, v1alpha1.PhaseRejected:
			st.Reservation, st.ProcessGroup = nil, nil
			st.CompletionTime = &now
			setCond(v1alpha1.ConditionComplete, metav1.ConditionFalse, ev.Reason, ev.Message)
		}
		st.Progress.ItemsDone, st.Progress.BatchesDone = ev.ItemsDone, ev.BatchesDone
		return projection{toPhase: ev.Phase, reason: ev.Reason, message: ev.Message, write: writeSoon}
	case queue.EventWaiting:
		typ := v1alpha1.ConditionAdmitted
		if v1alpha1.WaitsOnDependencies(ev.Reason) {
			typ = v1alpha1.ConditionDependenciesReady
		} else {
			setCond(v1alpha1.ConditionDependenciesReady, metav1.ConditionTrue, v1alpha1.ReasonAllDone, "every dependency is Done")
		}
		prev := meta.FindStatusCondition(st.Conditions, typ)
		sameReason := prev != nil && prev.Status == metav1.ConditionFalse && prev.Reason == ev.Reason
		changed := setCond(typ, metav1.ConditionFalse, ev.Reason, ev.Message)
		p := projection{waitLog: changed && !sameReason}
		switch {
		case st.Phase != v1alpha1.PhasePending:
			p.toPhase, p.reason, p.message, p.write = v1alpha1.PhasePending, ev.Reason, ev.Message, writeSoon
		case changed && sameReason:
			// Only the numbers moved (the load, the free memory): a
			// machine-wide gate over thousands of waiting tasks is not
			// thousands of writes and log lines per probe.
			p.write = writeNumbers
		case changed:
			p.write = writeNewWait
		}
		return p
	case queue.EventBatchStarted:
		b := ev.Batch
		st.LastBatch = &v1alpha1.BatchRecord{Index: b.Index, Start: b.Start, Size: b.Size, Threads: int32(b.Contract.Threads), StartTime: &now, Attempt: int32(b.Attempt)}
		st.Reservation = ContractStatus(b.Contract)
		// Each batch has its own contract (a retry after a kill for
		// memory reserves more): Admitted says the one in force.
		setCond(v1alpha1.ConditionAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted, queue.ContractMessage(b.Contract))
		return projection{write: writeSoon}
	case queue.EventBatchEnded:
		b, r := ev.Batch, ev.Result
		lb := &v1alpha1.BatchRecord{Index: b.Index, Start: b.Start, Size: b.Size, Threads: int32(b.Contract.Threads), Attempt: int32(b.Attempt), Reason: r.Reason}
		started, ended := metav1.NewTime(r.Started), metav1.NewTime(r.Ended)
		lb.StartTime, lb.EndTime = &started, &ended
		if r.ExitCode >= 0 {
			code := int32(r.ExitCode)
			lb.ExitCode = &code
		}
		if r.PeakMemoryBytes > 0 {
			lb.PeakMemory = resource.NewQuantity(r.PeakMemoryBytes, resource.BinarySI)
		}
		if r.PeakWorkingSetBytes > 0 {
			lb.WorkingSet = resource.NewQuantity(r.PeakWorkingSetBytes, resource.BinarySI)
		}
		if r.GPUMemoryMeasured {
			lb.PeakGPUMemory = resource.NewQuantity(r.PeakGPUMemoryBytes, resource.BinarySI)
		}
		st.LastBatch = lb
		st.ProcessGroup = nil
		if r.Reason == v1alpha1.ReasonEvicted {
			// Not the task's doing: its estimate and retries are untouched.
			setCond(v1alpha1.ConditionEvicted, metav1.ConditionTrue, v1alpha1.ReasonEvicted, r.Message)
		}
		if r.Reason == v1alpha1.ReasonMemoryExceeded && !strict {
			setCond(v1alpha1.ConditionEstimateLow, metav1.ConditionTrue, v1alpha1.ReasonMemoryExceeded, advice.estimateLowMessage(b, r))
		} else if r.Reason == v1alpha1.ReasonGPUMemoryExceeded && !strict {
			setCond(v1alpha1.ConditionEstimateLow, metav1.ConditionTrue, v1alpha1.ReasonGPUMemoryExceeded,
				fmt.Sprintf("batch %d of %d items: %s; retried under the measured need", b.Index, b.Size, r.Message)+
					advice.gpuSuggestion(b.Size, r.PeakGPUMemoryBytes))
		} else if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionEstimateLow); cond != nil && r.ExitCode == 0 && r.Reason == "" {
			// A batch succeeded since: the suggestion is the model's now.
			base, _, _ := strings.Cut(cond.Message, suggestionSep)
			suggest := advice.suggestion
			if cond.Reason == v1alpha1.ReasonGPUMemoryExceeded {
				suggest = advice.gpuSuggestion
			}
			setCond(v1alpha1.ConditionEstimateLow, metav1.ConditionTrue, cond.Reason, base+suggest(b.Size, 0))
		}
		st.Progress.ItemsDone, st.Progress.BatchesDone = ev.ItemsDone, ev.BatchesDone
		// The end of a batch is a commit point: written at once, so that
		// a crash re-runs at most the batch in flight. The events already
		// queued (a Done that follows) land in the same write.
		return projection{write: writeCommit, batchEnded: r}
	}
	return projection{}
}

func admittedMessage(ev queue.Event) string {
	if ev.Contract == nil {
		return ev.Message
	}
	return queue.ContractMessage(*ev.Contract)
}

// passingWait reports whether reason is one every queued task may pass
// through, not worth writing a fresh task's status for before
// QueuedWriteDelay: waiting for a worker of its own or for a CPU thread
// the running tasks hold (the queue's normal state, with or without
// --max-parallel: a thousand short tasks dropped at once each wait for
// one) or for the first snapshot of the machine (the controller's first
// second). A wait that lasts is written at QueuedWriteDelay all the same.
func passingWait(reason string) bool {
	switch reason {
	case queue.ReasonMaxParallel, string(governor.ReasonNoSnapshot), string(governor.ReasonNoFreeCPU):
		return true
	}
	return false
}

// waitNumbersDue reports whether a wait whose numbers alone moved is due
// for a write at now, given when one was last handed.
func waitNumbersDue(last, now time.Time) bool { return now.Sub(last) >= waitNumbersInterval }
