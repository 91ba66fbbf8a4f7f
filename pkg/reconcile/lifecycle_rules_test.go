package reconcile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// The lifecycle rules, without processes: the pure functions row by row,
// then the controller carrying them out against a scripted queue.

// TestDecideFileFollowsTheEditRules checks decideFile against each rule
// of the README's "Editing a manifest", for an edit seen by a running
// controller and for a spec changed while none ran.
func TestDecideFileFollowsTheEditRules(t *testing.T) {
	status := func(phase v1alpha1.Phase, hash string, conds ...metav1.Condition) *v1alpha1.TaskStatus {
		return &v1alpha1.TaskStatus{Phase: phase, SpecHash: hash, Conditions: conds}
	}
	dup := metav1.Condition{Type: v1alpha1.ConditionValid, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDuplicateName}
	invalidBefore := metav1.Condition{Type: v1alpha1.ConditionValid, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonInvalidSpec}
	type row struct {
		rule      string
		facts     fileFacts
		want      fileAction
		dropCarry bool
	}
	var rows []row
	// An edit seen by the controller, in every phase.
	for _, phase := range v1alpha1.Phases {
		held := phase == v1alpha1.PhaseReserved || phase == v1alpha1.PhaseRunning || phase == v1alpha1.PhasePaused
		st := status(phase, "old")
		rows = append(rows,
			row{"spec.paused (outside the hash) applies at once, in " + string(phase),
				fileFacts{known: true, status: st, specHash: "old", appliedHash: "old", held: held}, keepGeneration, false},
		)
		if held {
			rows = append(rows,
				row{"an edit while the task runs waits (" + string(phase) + ")",
					fileFacts{known: true, status: st, specHash: "new", appliedHash: "old", held: true}, awaitWorker, false},
				row{"an invalid edit while the task runs waits too (" + string(phase) + ")",
					fileFacts{known: true, status: st, specHash: "new", appliedHash: "old", invalid: true, held: true}, awaitWorker, false},
				row{"a restart applies the waiting edit now (" + string(phase) + ")",
					fileFacts{known: true, status: st, specHash: "new", appliedHash: "old", held: true, restartRequested: true}, restartGeneration, false},
				row{"a restart of an invalid edit changes nothing: it waits (" + string(phase) + ")",
					fileFacts{known: true, status: st, specHash: "new", appliedHash: "old", invalid: true, held: true, restartRequested: true}, awaitWorker, false},
				row{"a restart with no edit waiting changes nothing (" + string(phase) + ")",
					fileFacts{known: true, status: st, specHash: "old", appliedHash: "old", held: true, restartRequested: true}, keepGeneration, false},
			)
			continue
		}
		rows = append(rows,
			row{"an edit of a task no worker holds is the next generation at once (" + string(phase) + ")",
				fileFacts{known: true, status: st, specHash: "new", appliedHash: "old"}, startGeneration, false},
			row{"a restart of a task no worker holds is an edit as any other (" + string(phase) + ")",
				fileFacts{known: true, status: st, specHash: "new", appliedHash: "old", restartRequested: true}, startGeneration, false},
			row{"an invalid edit of a task no worker holds is rejected (" + string(phase) + ")",
				fileFacts{known: true, status: st, specHash: "new", appliedHash: "old", invalid: true}, rejectSpec, false},
			row{"the same spec turned invalid (a typo in a field outside the hash) is rejected (" + string(phase) + ")",
				fileFacts{known: true, status: st, specHash: "old", appliedHash: "old", invalid: true}, rejectSpec, false},
		)
	}
	// A task held between two batches (phase Pending, told to wait there).
	rows = append(rows, row{"an edit between two batches waits for the generation to end",
		fileFacts{known: true, status: status(v1alpha1.PhasePending, "old"), specHash: "new", appliedHash: "old", held: true}, awaitWorker, false},
		row{"a restart between two batches applies the edit now",
			fileFacts{known: true, status: status(v1alpha1.PhasePending, "old"), specHash: "new", appliedHash: "old", held: true, restartRequested: true}, restartGeneration, false})
	// First sight: what a previous controller left, or a new manifest.
	rows = append(rows,
		row{"a new manifest is generation 1", fileFacts{status: status("", "")}, startGeneration, true},
		row{"a new invalid manifest is rejected", fileFacts{status: status("", ""), invalid: true}, rejectSpec, false},
		row{"an invalid spec found at start is rejected, whatever its status", fileFacts{status: status(v1alpha1.PhaseRunning, "h"), specHash: "h", invalid: true}, rejectSpec, false},
		row{"a task left Done at its spec stays finished", fileFacts{status: status(v1alpha1.PhaseDone, "h"), specHash: "h"}, finishedGeneration, false},
		row{"a task left Failed at its spec stays finished", fileFacts{status: status(v1alpha1.PhaseFailed, "h"), specHash: "h"}, finishedGeneration, false},
		row{"a task left Rejected at its spec stays finished", fileFacts{status: status(v1alpha1.PhaseRejected, "h", invalidBefore), specHash: "h"}, finishedGeneration, false},
		row{"a task left Running at its spec resumes", fileFacts{status: status(v1alpha1.PhaseRunning, "h"), specHash: "h"}, resumeGeneration, false},
		row{"a task left Pending at its spec resumes", fileFacts{status: status(v1alpha1.PhasePending, "h"), specHash: "h"}, resumeGeneration, false},
		row{"a duplicate-name rejection is the file's situation: the name may be free now", fileFacts{status: status(v1alpha1.PhaseRejected, "h", dup), specHash: "h"}, startGeneration, false},
		row{"a spec changed while none ran, from Done: no progress carried", fileFacts{status: status(v1alpha1.PhaseDone, "old"), specHash: "new"}, startGeneration, true},
		row{"a spec changed while none ran, from Running: as an edit that waited for Done", fileFacts{status: status(v1alpha1.PhaseRunning, "old"), specHash: "new"}, startGeneration, true},
		row{"a spec changed while none ran, from Pending", fileFacts{status: status(v1alpha1.PhasePending, "old"), specHash: "new"}, startGeneration, true},
		row{"a spec changed while none ran, from Failed: progress carries", fileFacts{status: status(v1alpha1.PhaseFailed, "old"), specHash: "new"}, startGeneration, false},
		row{"a spec changed while none ran, from Rejected: progress carries", fileFacts{status: status(v1alpha1.PhaseRejected, "old"), specHash: "new"}, startGeneration, false},
	)
	for _, r := range rows {
		act, drop := decideFile(r.facts)
		if act != r.want || drop != r.dropCarry {
			t.Errorf("%s: got %v (dropCarry %v), want %v (dropCarry %v)", r.rule, act, drop, r.want, r.dropCarry)
		}
	}
}

// TestProgressCarriesOnlyWhereTheRulesSay: the next generation starts from
// the committed progress only when the previous one did not end Done and
// its items and working directory are unchanged; a resumed one keeps its
// status's progress unless its items changed.
func TestProgressCarriesOnlyWhereTheRulesSay(t *testing.T) {
	prev := v1alpha1.Progress{ItemsTotal: 10, ItemsDone: 6, BatchesDone: 3, InputsHash: "in"}
	for _, r := range []struct {
		rule         string
		phase        v1alpha1.Phase
		inputs       string
		total        int64
		done, batch  int64
		carry        bool
		resumedStart bool
	}{
		{"same inputs, Failed: carried", v1alpha1.PhaseFailed, "in", 10, 6, 3, true, false},
		{"same inputs, Rejected: carried", v1alpha1.PhaseRejected, "in", 10, 6, 3, true, false},
		{"same inputs, still running (an edit that waited): carried", v1alpha1.PhaseRunning, "in", 10, 6, 3, true, false},
		{"same inputs, Done: a Done task edited runs again whole", v1alpha1.PhaseDone, "in", 10, 0, 0, true, false},
		{"items or workingDir changed: nothing carried", v1alpha1.PhaseFailed, "other", 10, 0, 0, false, true},
		{"item count changed: nothing carried", v1alpha1.PhaseFailed, "in", 12, 0, 0, false, true},
	} {
		done, batches, carry := carriedProgress(prev, r.phase, r.inputs, r.total)
		if done != r.done || batches != r.batch || carry != r.carry {
			t.Errorf("%s: carried %d items, %d batches (carry %v); want %d, %d (%v)", r.rule, done, batches, carry, r.done, r.batch, r.carry)
		}
		got, startOver := resumedProgress(prev, r.inputs, r.total)
		if startOver != r.resumedStart || got.InputsHash != r.inputs || (startOver && got.ItemsDone != 0) || (!startOver && got.ItemsDone != 6) {
			t.Errorf("%s: resumed %+v (start over %v)", r.rule, got, startOver)
		}
	}
	if got, startOver := resumedProgress(v1alpha1.Progress{ItemsTotal: 4, ItemsDone: 9}, "", 4); !startOver || got.ItemsDone != 0 {
		t.Errorf("more items done than there are: resumed %+v", got)
	}
}

// noAdvice stands in for the controller's estimate advice.
type noAdvice struct{}

func (noAdvice) estimateLowMessage(*queue.Batch, *queue.BatchResult) string { return "low" }
func (noAdvice) suggestion(int64, int64) string                             { return "; suggested: more" }
func (noAdvice) gpuSuggestion(int64, int64) string                          { return "; suggested: more GPU memory" }

// TestProjectEventSetsWhatEachEventSays: every kind of queue event, onto
// a status, with the phase it names and how soon it must be written.
func TestProjectEventSetsWhatEachEventSays(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	contract := &governor.Contract{Threads: 2, MemoryBytes: 1 << 30}
	batch := &queue.Batch{Index: 2, Size: 4, Contract: *contract}
	for _, r := range []struct {
		name  string
		from  v1alpha1.TaskStatus
		ev    queue.Event
		want  projection
		check func(st *v1alpha1.TaskStatus) string
	}{
		{"Reserved records the reservation and admission",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhasePending},
			queue.Event{Type: queue.EventPhase, Phase: v1alpha1.PhaseReserved, Reason: "Admitted", Contract: contract},
			projection{toPhase: v1alpha1.PhaseReserved, reason: "Admitted", write: writeSoon},
			func(st *v1alpha1.TaskStatus) string {
				if st.Reservation == nil || !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAdmitted) {
					return "no reservation or admission"
				}
				return ""
			}},
		{"Running sets the start time once",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhaseReserved},
			queue.Event{Type: queue.EventPhase, Phase: v1alpha1.PhaseRunning},
			projection{toPhase: v1alpha1.PhaseRunning, write: writeSoon},
			func(st *v1alpha1.TaskStatus) string {
				if st.StartTime == nil || !st.StartTime.Time.Equal(at) {
					return "no start time"
				}
				return ""
			}},
		{"Paused stops the clock of the batch in flight",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, LastBatch: &v1alpha1.BatchRecord{StartTime: &metav1.Time{Time: at.Add(-time.Hour)}, PausedSeconds: 5}},
			queue.Event{Type: queue.EventPhase, Phase: v1alpha1.PhasePaused, Reason: v1alpha1.ReasonPaused},
			projection{toPhase: v1alpha1.PhasePaused, reason: v1alpha1.ReasonPaused, write: writeSoon},
			func(st *v1alpha1.TaskStatus) string {
				if lb := st.LastBatch; lb.PausedSince == nil || !lb.PausedSince.Time.Equal(at) || lb.PausedSeconds != 5 {
					return fmt.Sprintf("paused since %v, %d s", lb.PausedSince, lb.PausedSeconds)
				}
				return ""
			}},
		{"Running after a pause adds it to the batch's paused time",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhasePaused, StartTime: &metav1.Time{Time: at.Add(-time.Hour)},
				LastBatch: &v1alpha1.BatchRecord{StartTime: &metav1.Time{Time: at.Add(-time.Hour)}, PausedSeconds: 5, PausedSince: &metav1.Time{Time: at.Add(-90 * time.Second)}}},
			queue.Event{Type: queue.EventPhase, Phase: v1alpha1.PhaseRunning, Reason: v1alpha1.ReasonAdmitted},
			projection{toPhase: v1alpha1.PhaseRunning, reason: v1alpha1.ReasonAdmitted, write: writeSoon},
			func(st *v1alpha1.TaskStatus) string {
				if lb := st.LastBatch; lb.PausedSince != nil || lb.PausedSeconds != 95 {
					return fmt.Sprintf("paused since %v, %d s; want none, 95 s", lb.PausedSince, lb.PausedSeconds)
				}
				return ""
			}},
		{"Done completes and releases",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, Reservation: &v1alpha1.Contract{}},
			queue.Event{Type: queue.EventPhase, Phase: v1alpha1.PhaseDone, ItemsDone: 4, BatchesDone: 2},
			projection{toPhase: v1alpha1.PhaseDone, write: writeSoon},
			func(st *v1alpha1.TaskStatus) string {
				if st.Reservation != nil || st.CompletionTime == nil || !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionComplete) || st.Progress.ItemsDone != 4 {
					return "not completed"
				}
				return ""
			}},
		{"Failed completes False with the reason",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning},
			queue.Event{Type: queue.EventPhase, Phase: v1alpha1.PhaseFailed, Reason: v1alpha1.ReasonExitCode},
			projection{toPhase: v1alpha1.PhaseFailed, reason: v1alpha1.ReasonExitCode, write: writeSoon},
			func(st *v1alpha1.TaskStatus) string {
				c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete)
				if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonExitCode {
					return "no Complete=False"
				}
				return ""
			}},
		{"a first wait for memory is a new reason",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhasePending},
			queue.Event{Type: queue.EventWaiting, Reason: "InsufficientMemory", Message: "1 GiB free"},
			projection{write: writeNewWait, waitLog: true},
			func(st *v1alpha1.TaskStatus) string {
				if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionDependenciesReady) || meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionAdmitted) {
					return "dependencies not ready or admitted"
				}
				return ""
			}},
		{"the same wait with new numbers is written seldom",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhasePending, Conditions: []metav1.Condition{{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "InsufficientMemory", Message: "1 GiB free"}}},
			queue.Event{Type: queue.EventWaiting, Reason: "InsufficientMemory", Message: "2 GiB free"},
			projection{write: writeNumbers}, nil},
		{"the same wait, same numbers: nothing",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhasePending, Conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionDependenciesReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllDone, Message: "every dependency is Done"},
				{Type: v1alpha1.ConditionAdmitted, Status: metav1.ConditionFalse, Reason: "InsufficientMemory", Message: "1 GiB free"}}},
			queue.Event{Type: queue.EventWaiting, Reason: "InsufficientMemory", Message: "1 GiB free"},
			projection{write: writeNone}, nil},
		{"a wait for a dependency goes to DependenciesReady",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhasePending},
			queue.Event{Type: queue.EventWaiting, Reason: v1alpha1.ReasonWaitingForDependencies},
			projection{write: writeNewWait, waitLog: true},
			func(st *v1alpha1.TaskStatus) string {
				c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDependenciesReady)
				if c == nil || c.Status != metav1.ConditionFalse || meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAdmitted) != nil {
					return "not on DependenciesReady"
				}
				return ""
			}},
		{"a wait between two batches moves the task back to Pending",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning},
			queue.Event{Type: queue.EventWaiting, Reason: "InsufficientMemory"},
			projection{toPhase: v1alpha1.PhasePending, reason: "InsufficientMemory", write: writeSoon, waitLog: true}, nil},
		{"a batch start records the batch",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning},
			queue.Event{Type: queue.EventBatchStarted, Batch: batch},
			projection{write: writeSoon},
			func(st *v1alpha1.TaskStatus) string {
				if st.LastBatch == nil || st.LastBatch.Index != 2 || st.LastBatch.EndTime != nil || st.Reservation == nil {
					return "no batch record"
				}
				return ""
			}},
		{"a batch end is a commit point",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning},
			queue.Event{Type: queue.EventBatchEnded, Batch: batch, Result: &queue.BatchResult{ExitCode: 0, Started: at, Ended: at}, ItemsDone: 4, BatchesDone: 1},
			projection{write: writeCommit},
			func(st *v1alpha1.TaskStatus) string {
				if st.LastBatch == nil || st.LastBatch.EndTime == nil || st.Progress.ItemsDone != 4 {
					return "not committed"
				}
				return ""
			}},
		{"a batch killed for memory says the estimate was low",
			v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning},
			queue.Event{Type: queue.EventBatchEnded, Batch: batch, Result: &queue.BatchResult{ExitCode: -1, Reason: v1alpha1.ReasonMemoryExceeded}},
			projection{write: writeCommit},
			func(st *v1alpha1.TaskStatus) string {
				if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionEstimateLow); c == nil || c.Message != "low" {
					return "no EstimateTooLow"
				}
				return ""
			}},
	} {
		st := r.from.DeepCopy()
		ev := r.ev
		ev.Time = at
		got := projectEvent(st, ev, false, noAdvice{})
		got.message, got.batchEnded = "", nil
		if got != r.want {
			t.Errorf("%s: projection %+v, want %+v", r.name, got, r.want)
		}
		if st.Phase != r.from.Phase {
			t.Errorf("%s: the projection moved the phase itself", r.name)
		}
		if r.check != nil {
			if msg := r.check(st); msg != "" {
				t.Errorf("%s: %s: %+v", r.name, msg, st)
			}
		}
	}
	// estimate: strict keeps halving: no EstimateTooLow.
	st := &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning}
	projectEvent(st, queue.Event{Type: queue.EventBatchEnded, Batch: batch, Result: &queue.BatchResult{Reason: v1alpha1.ReasonMemoryExceeded}}, true, noAdvice{})
	if meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionEstimateLow) != nil {
		t.Error("estimate: strict got an EstimateTooLow condition")
	}
}

// countingMetrics counts the refused transitions.
type countingMetrics struct {
	noMetrics
	refused int
}

func (m *countingMetrics) ObservePhaseRefused(_, _ v1alpha1.Phase) { m.refused++ }

// bareController is a controller of a spool nobody watches, for the rules
// carried out without processes: its queue is q.
func bareController(t *testing.T, q taskQueue) *Controller {
	t.Helper()
	gov := governor.New(governor.Config{MemoryReserved: -1})
	t.Cleanup(func() { _ = gov.Close() })
	c := New(Config{SpoolDir: t.TempDir()}, Deps{Spool: &tallySpool{writes: map[string]int{}}, Governor: gov, Logger: zerolog.Nop()})
	c.queue = q
	return c
}

// TestSetPhaseMovesExactlyWhatTheTableAllows: every transition between
// two phases, the first ("") included, through the controller's setPhase:
// an allowed one moves and is to be written at once, a forbidden one
// changes nothing and is counted as a bug.
func TestSetPhaseMovesExactlyWhatTheTableAllows(t *testing.T) {
	m := &countingMetrics{}
	c := bareController(t, nil)
	c.metrics = m
	froms := append([]v1alpha1.Phase{""}, v1alpha1.Phases...)
	allowed, forbidden := 0, 0
	for _, from := range froms {
		for _, to := range v1alpha1.Phases {
			e := &entry{path: "/s/" + string(from) + "-" + string(to), name: "t", status: v1alpha1.TaskStatus{Phase: from}}
			c.tasks.put(e.path, e)
			before := m.refused
			c.setPhase(e, to, "Test", "test")
			switch {
			case from == to:
				if e.status.Phase != to || m.refused != before || !e.marked || e.urgent {
					t.Errorf("%q → %q (same): phase %q, refused %d, marked %v urgent %v", from, to, e.status.Phase, m.refused-before, e.marked, e.urgent)
				}
			case v1alpha1.AllowedTransition(from, to):
				allowed++
				if e.status.Phase != to || m.refused != before || !e.urgent {
					t.Errorf("%q → %q (allowed): phase %q, refused %d, urgent %v", from, to, e.status.Phase, m.refused-before, e.urgent)
				}
			default:
				forbidden++
				if e.status.Phase != from || m.refused != before+1 || e.marked {
					t.Errorf("%q → %q (forbidden): phase %q, refused %d, marked %v", from, to, e.status.Phase, m.refused-before, e.marked)
				}
			}
		}
	}
	if allowed == 0 || forbidden == 0 {
		t.Fatalf("%d allowed, %d forbidden: the table is not exercised", allowed, forbidden)
	}
}

// scriptedQueue is a queue whose answers the test sets: which tasks a
// worker holds; it records every task it was handed.
type scriptedQueue struct {
	held     map[string]bool
	replaced []queue.Task
	removed  []string
	paused   map[string]bool
	phase    map[string]v1alpha1.Phase
}

func newScriptedQueue() *scriptedQueue {
	return &scriptedQueue{held: map[string]bool{}, paused: map[string]bool{}, phase: map[string]v1alpha1.Phase{}}
}

func (q *scriptedQueue) Replace(t queue.Task) (queue.Replaced, error) {
	if q.held[t.Name] {
		return queue.Replaced{Existed: true, Phase: q.phase[t.Name]}, fmt.Errorf("held: %w", queue.ErrSpecPending)
	}
	rep := queue.Replaced{Existed: q.phase[t.Name] != "", Phase: q.phase[t.Name], ItemsDone: t.ItemsDone, BatchesDone: t.BatchesDone}
	q.replaced = append(q.replaced, t)
	q.phase[t.Name] = v1alpha1.PhasePending
	if t.Terminal != "" {
		q.phase[t.Name] = t.Terminal
	}
	return rep, nil
}
func (q *scriptedQueue) Remove(name string) error { q.removed = append(q.removed, name); return nil }
func (q *scriptedQueue) Holds(name string) bool   { return q.held[name] }
func (q *scriptedQueue) SetPaused(name string, paused bool) error {
	q.paused[name] = paused
	return nil
}

// fileVersion is a manifest's version as the spool reports it.
func fileVersion(t *testing.T, name, command, extra string) *v1alpha1.Task {
	t.Helper()
	task, err := v1alpha1.ParseManifest(name+".yaml", []byte(manifest(name, command, extra)))
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// TestEditsAreCarriedOutAsTheRulesSay drives the controller's file and
// queue-event handling against a scripted queue: a pause applies at
// once; an edit of a running task waits under SpecApplied=False and is
// the next generation the moment the current one ends Done; an edit of a
// task no worker holds is the next generation at once; an invalid one is
// rejected; a rejected Done task re-runs its Done dependents.
func TestEditsAreCarriedOutAsTheRulesSay(t *testing.T) {
	q := newScriptedQueue()
	c := bareController(t, q)
	path := c.cfg.SpoolDir + "/a.yaml"
	// answered gives the controller what the resolver answers, as its
	// loop would.
	answered := func() {
		c.resolver.answerAll()
		c.applyInbox()
	}
	event := func(task *v1alpha1.Task, parseErr error) {
		c.handleFile(spoolEvent(path, task, parseErr))
		answered()
	}
	queueEvent := func(ev queue.Event) {
		ev.Time = time.Now()
		c.applyQueueEvent(ev)
		answered()
	}
	event(fileVersion(t, "a", "echo one", ""), nil)
	e := c.tasks.named("a")
	if e == nil || len(q.replaced) != 1 || q.replaced[0].Generation != 1 || e.status.Phase != v1alpha1.PhasePending {
		t.Fatalf("a new manifest: %d handed, entry %+v", len(q.replaced), e)
	}
	// The queue runs it.
	q.held["a"] = true
	queueEvent(queue.Event{Task: "a", Generation: 1, Type: queue.EventPhase, Phase: v1alpha1.PhaseReserved})
	queueEvent(queue.Event{Task: "a", Generation: 1, Type: queue.EventPhase, Phase: v1alpha1.PhaseRunning})
	event(fileVersion(t, "a", "echo one", "  paused: true\n"), nil)
	if !q.paused["a"] || len(q.replaced) != 1 {
		t.Errorf("spec.paused did not apply at once, alone (paused %v, %d handed)", q.paused["a"], len(q.replaced))
	}
	event(fileVersion(t, "a", "echo two", "  paused: true\n"), nil)
	if c := meta.FindStatusCondition(e.status.Conditions, v1alpha1.ConditionSpecApplied); c == nil || c.Reason != v1alpha1.ReasonSpecChangePending || len(q.replaced) != 1 {
		t.Fatalf("an edit while running: %+v, %d handed", e.status.Conditions, len(q.replaced))
	}
	// The generation ends Done: the edit is the next generation now.
	q.held["a"] = false
	queueEvent(queue.Event{Task: "a", Generation: 1, Type: queue.EventPhase, Phase: v1alpha1.PhaseDone, ItemsDone: 4})
	if len(q.replaced) != 2 || q.replaced[1].Generation != 2 || q.replaced[1].ItemsDone != 0 || e.status.ObservedGeneration != 2 {
		t.Fatalf("after Done: %d handed (%+v), generation %d", len(q.replaced), q.replaced, e.status.ObservedGeneration)
	}
	if meta.FindStatusCondition(e.status.Conditions, v1alpha1.ConditionSpecApplied) != nil {
		t.Error("SpecApplied=False stayed on the new generation")
	}
	// Not held: an edit is the next generation at once.
	event(fileVersion(t, "a", "echo three", ""), nil)
	if len(q.replaced) != 3 || q.replaced[2].Generation != 3 {
		t.Fatalf("an edit of a waiting task: %d handed", len(q.replaced))
	}
	// A dependent, Done; then an invalid edit of a Done a rejects a and
	// re-runs the dependent.
	queueEvent(queue.Event{Task: "a", Generation: 3, Type: queue.EventPhase, Phase: v1alpha1.PhaseDone, ItemsDone: 4})
	bPath := c.cfg.SpoolDir + "/b.yaml"
	c.handleFile(spoolEvent(bPath, fileVersion(t, "b", "true", "  dependsOn: [a]\n"), nil))
	answered()
	queueEvent(queue.Event{Task: "b", Generation: 1, Type: queue.EventPhase, Phase: v1alpha1.PhaseDone, ItemsDone: 4})
	if c.batches.lookup("b", 1) != nil {
		t.Error("a Done generation's items are still held")
	}
	handed := len(q.replaced)
	event(fileVersion(t, "a", "echo four", ""), errors.New("spec.command: invalid"))
	if e.status.Phase != v1alpha1.PhaseRejected || len(q.removed) != 1 || e.status.ObservedGeneration != 4 {
		t.Fatalf("an invalid edit: phase %s at generation %d (want Rejected at 4), removed %v", e.status.Phase, e.status.ObservedGeneration, q.removed)
	}
	b := c.tasks.named("b")
	if len(q.replaced) != handed+1 || q.replaced[handed].Name != "b" || b.status.ObservedGeneration != 2 {
		t.Fatalf("the Done dependent of a rejected Done task did not run again: %+v", q.replaced[handed:])
	}
	if r := meta.FindStatusCondition(b.status.Conditions, v1alpha1.ConditionRerun); r == nil || !strings.Contains(r.Message, "a") {
		t.Errorf("the dependent does not say why it runs again: %+v", b.status.Conditions)
	}
}

// spoolEvent is the spool's report of a parseable version of path.
func spoolEvent(path string, task *v1alpha1.Task, parseErr error) spool.Event {
	return spool.Event{Type: spool.Modified, Path: path, Name: task.Metadata.Name, Task: task, Err: parseErr}
}

// TestItemsAnsweredForAnOlderVersionAreNotApplied: items are resolved off
// the owner goroutine; an edit made while the first version's items are
// on their way supersedes them, so the queue gets one generation, whole:
// the new spec with its own items, never the old items under the new
// command or the other way round.
func TestItemsAnsweredForAnOlderVersionAreNotApplied(t *testing.T) {
	q := newScriptedQueue()
	c := bareController(t, q)
	path := c.cfg.SpoolDir + "/a.yaml"
	c.handleFile(spoolEvent(path, fileVersion(t, "a", "echo one", ""), nil))
	two, err := v1alpha1.ParseManifest("a.yaml", []byte(strings.Replace(manifest("a", "echo two", ""), "count: 4", "count: 7", 1)))
	if err != nil {
		t.Fatal(err)
	}
	c.handleFile(spoolEvent(path, two, nil))
	if len(q.replaced) != 0 {
		t.Fatalf("the queue got a task before its items were resolved: %+v", q.replaced)
	}
	if c.settled() {
		t.Error("settled while items are being resolved")
	}
	c.resolver.answerAll()
	c.applyInbox()
	if len(q.replaced) != 1 || q.replaced[0].ItemsTotal != 7 || q.replaced[0].Generation != 1 {
		t.Fatalf("handed %+v, want one generation 1 of 7 items", q.replaced)
	}
	ri := c.batches.lookup("a", 1)
	if ri == nil || ri.items.Len() != 7 || !strings.Contains(strings.Join(ri.command, " "), "echo two") {
		t.Errorf("the batches of generation 1 run %+v", ri)
	}
}

// TestACopiedManifestDoesNotInheritTheStatus is the attack of issue 32: a
// running task's manifest copied under a new metadata.name ran only the
// items after the copied progress and reported Done; a copy of a Done
// task was Done with nothing run. A status is bound to the name it was
// written for; one of another task starts from nothing. A status written
// before the binding existed is trusted as before.
func TestACopiedManifestDoesNotInheritTheStatus(t *testing.T) {
	for _, c := range []struct {
		name, statusOf string
		phase          v1alpha1.Phase
		wantGen        int64
		wantDone       int64
	}{
		{"a copy of a running task", "orig", v1alpha1.PhaseRunning, 1, 0},
		{"a copy of a Done task", "orig", v1alpha1.PhaseDone, 1, 0},
		{"the task's own status", "copy", v1alpha1.PhaseRunning, 3, 2},
		{"a status from before the binding", "", v1alpha1.PhaseRunning, 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := newScriptedQueue()
			ctrl := bareController(t, q)
			task := fileVersion(t, "copy", "true", "")
			task.Status = v1alpha1.TaskStatus{Phase: c.phase, ObservedGeneration: 3, SpecHash: v1alpha1.SpecHash(task.Spec), TaskName: c.statusOf,
				QueueSeq: 7, LogFile: filepath.Join(ctrl.cfg.StateDir, "logs", "copy.log"), Progress: v1alpha1.Progress{ItemsTotal: 4, ItemsDone: 2, BatchesDone: 1, InputsHash: v1alpha1.InputsHash(task.Spec)}}
			ctrl.handleFile(spoolEvent(ctrl.cfg.SpoolDir+"/copy.yaml", task, nil))
			ctrl.resolver.answerAll()
			ctrl.applyInbox()
			e := ctrl.tasks.named("copy")
			if len(q.replaced) != 1 {
				t.Fatalf("handed %d tasks to the queue", len(q.replaced))
			}
			got := q.replaced[0]
			if got.Generation != c.wantGen || got.ItemsDone != c.wantDone || got.Terminal != "" {
				t.Errorf("queued generation %d from %d items (terminal %q); want generation %d from %d", got.Generation, got.ItemsDone, got.Terminal, c.wantGen, c.wantDone)
			}
			if e.status.TaskName != "copy" {
				t.Errorf("the status is bound to %q", e.status.TaskName)
			}
		})
	}
}

// TestAGlobOverADependencysOutputsWaitsForIt: a task whose glob matches
// the files a dependency makes (features over the images import copies)
// was Rejected "no items" when both were dropped together. Its items wait
// for its dependencies: it is Pending, saying why, until they are Done,
// then queued on what they made; a glob still matching nothing once every
// dependency is Done is rejected as before.
func TestAGlobOverADependencysOutputsWaitsForIt(t *testing.T) {
	q := newScriptedQueue()
	c := bareController(t, q)
	answered := func() {
		c.resolver.answerAll()
		c.applyInbox()
	}
	images := filepath.Join(c.cfg.SpoolDir, "images")
	if err := os.Mkdir(images, 0o755); err != nil {
		t.Fatal(err)
	}
	globbing := func(name string) *v1alpha1.Task {
		task, err := v1alpha1.ParseManifest(name+".yaml", []byte(strings.Replace(manifest(name, "true", "  dependsOn: [a]\n"), "items: {count: 4}", `items: {glob: "images/*.jpg"}`, 1)))
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	c.handleFile(spoolEvent(c.cfg.SpoolDir+"/a.yaml", fileVersion(t, "a", "true", ""), nil))
	c.handleFile(spoolEvent(c.cfg.SpoolDir+"/b.yaml", globbing("b"), nil))
	answered()
	b := c.tasks.named("b")
	cond := meta.FindStatusCondition(b.status.Conditions, v1alpha1.ConditionDependenciesReady)
	if len(q.replaced) != 1 || b.status.Phase != v1alpha1.PhasePending || cond == nil || cond.Reason != v1alpha1.ReasonWaitingForDependencies || !strings.Contains(cond.Message, "a is Done") {
		t.Fatalf("b before a ran: %d tasks queued, phase %q, %+v", len(q.replaced), b.status.Phase, cond)
	}
	if c.settled() {
		t.Error("settled while b waits for a")
	}
	for _, f := range []string{"1.jpg", "2.jpg"} {
		if err := os.WriteFile(filepath.Join(images, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.applyQueueEvent(queue.Event{Task: "a", Generation: 1, Type: queue.EventPhase, Phase: v1alpha1.PhaseDone, ItemsDone: 4, Time: time.Now()})
	answered()
	if last := q.replaced[len(q.replaced)-1]; last.Name != "b" || last.ItemsTotal != 2 || b.status.ObservedGeneration != 1 {
		t.Fatalf("after a Done: last queued %+v, b at generation %d", last, b.status.ObservedGeneration)
	}
	// Every dependency Done, nothing matched: rejected.
	if err := os.Remove(filepath.Join(images, "1.jpg")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(images, "2.jpg")); err != nil {
		t.Fatal(err)
	}
	c.handleFile(spoolEvent(c.cfg.SpoolDir+"/d.yaml", globbing("d"), nil))
	answered()
	if d := c.tasks.named("d"); d.status.Phase != v1alpha1.PhaseRejected {
		t.Errorf("a glob matching nothing with its dependency Done: phase %q", d.status.Phase)
	}
}
