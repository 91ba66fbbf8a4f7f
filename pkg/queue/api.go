package queue

import (
	"context"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// Admitter is the queue's view of the governor. The queue never judges
// resources itself: it asks, and obeys the verdict.
type Admitter interface {
	// Refresh asks for a fresh snapshot of the machine. The queue calls it
	// once per scan and at every sequence break, with its mutex held, so it
	// must not block: it only kicks whoever probes.
	Refresh()
	// Reserve is the governor's atomic decide-and-reserve. ok is true when a
	// reservation was granted (verdict Admit or ReduceBatch).
	Reserve(e governor.Estimate) (d governor.Decision, r Reservation, ok bool)
	// Release returns a reservation's budgets; a second release is an error.
	Release(r Reservation) error
	// Changed is closed at the next governor generation change (hardware
	// seen or gone, limits changed); the queue then offers again the tasks
	// it rejected for hardware (see HardwareRejection).
	Changed() <-chan struct{}
}

// Learner learns tasks' costs from their batches and revises the estimates
// of the tasks that learn (Task.Mode not strict). Both methods are called
// with the queue's mutex held: they must not block, do IO, or call back
// into the queue.
type Learner interface {
	// Observe records a finished batch of t, whatever its outcome.
	Observe(t *Task, b Batch, res BatchResult)
	// Estimate is the estimate for t's next batch, kills counting its
	// batches killed for memory and for GPU memory in this generation; it is asked for
	// every task not in strict mode at every admission, so it must be
	// cheap. The queue caps the batch by the items left afterwards. It may
	// depend only on t's Estimate, Profile, Mode, ItemsTotal, ItemsDone and
	// InputBytesPerItem, kills, the learner's own state (which changes in
	// Observe) and the free memory: within one scan, until a reservation
	// is granted, the queue asks each distinct question once.
	Estimate(t *Task, kills Kills) governor.Estimate
}

// Kills counts a task's batches killed in one generation, by what they
// exceeded.
type Kills struct {
	// Memory: MemoryExceeded; GPUMemory: GPUMemoryExceeded.
	Memory, GPUMemory int
}

// total is every kill.
func (k Kills) total() int { return k.Memory + k.GPUMemory }

// exceeded reports whether reason is a batch killed for exceeding its
// memory or its GPU memory.
func exceeded(reason string) bool {
	return reason == v1alpha1.ReasonMemoryExceeded || reason == v1alpha1.ReasonGPUMemoryExceeded
}

// Reservation is a grant of the Admitter: the queue reads its contract and
// hands it back to Release, exactly once. governor.Reservation is one.
type Reservation interface {
	// Contract is exactly what the work may use.
	Contract() governor.Contract
}

// BatchRunner starts one batch of a task as real processes. The queue knows
// nothing of commands: the runner finds them from the task name.
type BatchRunner interface {
	// Start launches the batch. An error means it could not start at all
	// (for example the command does not exist); the task then fails.
	Start(ctx context.Context, b Batch) (RunningBatch, error)
}

// RunningBatch is a batch in flight.
type RunningBatch interface {
	// Pause stops every process of the batch (SIGSTOP to the group).
	Pause() error
	// Resume continues them (SIGCONT).
	Resume() error
	// Cancel terminates the group (SIGTERM, then SIGKILL after a grace period).
	Cancel()
	// Wait blocks until the batch has ended and every process is gone.
	Wait() BatchResult
}

// Batch is one batch to run, under a contract.
type Batch struct {
	// Task is the task's name.
	Task string
	// Index is the batch's number within the task, from 0.
	Index int64
	// Start is the first item's index; Size the number of items.
	Start, Size int64
	// Total is the task's item count.
	Total int64
	// Generation is the task's generation the batch belongs to.
	Generation int64
	// Attempt is 1 for the first try of this batch.
	Attempt int
	// Contract is what the batch may use.
	Contract governor.Contract
	// Timeout kills the batch when it runs longer (0: none).
	Timeout time.Duration
}

// BatchResult is how a batch ended.
type BatchResult struct {
	// ExitCode of the command; -1 when it was killed.
	ExitCode int
	// Reason is empty for a plain exit, else one of v1alpha1's reasons
	// (MemoryExceeded, GPUMemoryExceeded, BatchTimeout, CommandNotFound)
	// or "Cancelled".
	Reason string
	// Message explains Reason with numbers.
	Message string
	// PeakMemoryBytes is the batch's peak memory: its cgroup's peak
	// charge, or the group's sampled resident memory without a cgroup.
	PeakMemoryBytes int64
	// PeakWorkingSetBytes is the batch's highest sampled working set (page
	// cache it only read excluded).
	PeakWorkingSetBytes int64
	// PeakGPUMemoryBytes is the highest GPU memory its processes were
	// measured using, valid when GPUMemoryMeasured.
	PeakGPUMemoryBytes int64
	GPUMemoryMeasured  bool
	// InputBytes is the total size of the batch's items that are regular
	// files (0: none is).
	InputBytes int64
	// Started and Ended bound the batch.
	Started, Ended time.Time
}

// Task is what the queue knows of a task: enough to order it, ask the
// governor, and cut it into batches.
type Task struct {
	// Name is unique among the queue's tasks.
	Name string
	// Seq orders the FIFO; lower first. Ties break by Name.
	Seq int64
	// Estimate is handed to the governor as is, except BatchMax which the
	// queue caps by the items left (and halves after a MemoryExceeded or
	// GPUMemoryExceeded).
	Estimate governor.Estimate
	// ItemsTotal is the number of items; ItemsDone of them are committed.
	ItemsTotal, ItemsDone int64
	// BatchesDone is the number of committed batches.
	BatchesDone int64
	// DependsOn names tasks that must be Done first.
	DependsOn []string
	// Paused holds the task (before start) or stops its batch (while running).
	Paused bool
	// Retries per batch, with exponential backoff from RetryBackoff.
	Retries int
	// BatchTimeout per batch (0: none).
	BatchTimeout time.Duration
	// Terminal is set for a task that already ended (Done, Failed or
	// Rejected); such a task is kept only so its dependents can be resolved.
	Terminal v1alpha1.Phase
	// TerminalReason is why a Terminal task ended; a Rejected task with a
	// HardwareRejection reason is offered again when the hardware changes.
	TerminalReason string
	// Generation is the spec's generation. An Upsert with the generation
	// the queue already holds never restarts a task the queue has ended
	// (only Paused is taken from it); a different generation does.
	Generation int64
	// Mode says how the memory costs are chosen (see v1alpha1.EstimateMode):
	// with a Learner, a task not in strict mode asks it for every estimate
	// (a declared one gets its declaration back unless proven too low), and a
	// batch killed for memory of a declared or learned task is retried
	// under the Learner's revised estimate instead of a halved batch. A
	// strict task (or any task without a Learner) keeps Estimate, halves
	// its batch after a kill and fails at BatchMin.
	Mode v1alpha1.EstimateMode
	// Profile keys the history the task's batches feed (for the Learner).
	Profile string
	// InputBytesPerItem is the mean size of the task's items that are
	// files (for the Learner: a profile whose memory follows its input's
	// size prices this task's items by it).
	InputBytesPerItem float64
	// CarryProgress asks Replace to continue from the committed progress of
	// the generation it replaces (ItemsDone, BatchesDone above are then
	// ignored), unless that generation ended Done: a finished generation's
	// progress never carries, so an edited Done task runs again.
	CarryProgress bool
	// Priority orders the task before every task of a lower one, whatever
	// their accounts (spec.priority resolved; default 0). A task waiting
	// gains on higher priorities as it waits (Config.PriorityMaxAge).
	Priority int64
	// Account is who the task's use is charged to, for fair share and
	// quotas (the spool's owner, or its configured account; "" is an
	// account too).
	Account string
	// Restart lets Replace take a new generation of a task a worker holds
	// (else refused with ErrSpecPending): the generation in flight is
	// cancelled as Remove cancels it (its batch killed, its reservation
	// released, nothing more emitted for it) and this one replaces it,
	// from the queue's committed progress when CarryProgress says so.
	Restart bool
}

// Replaced is what Replace found under the task's name and what the new
// generation starts from: the queue's own account, which may be ahead of
// the events the caller has applied so far.
type Replaced struct {
	// Existed is false when the name was new to the queue.
	Existed bool
	// Generation and Phase of the replaced entry (zero when none).
	Generation int64
	Phase      v1alpha1.Phase
	// ItemsDone and BatchesDone are the committed progress the new
	// generation starts from.
	ItemsDone, BatchesDone int64
}

// EventType says what happened to a task.
type EventType int

// The event types.
const (
	// EventPhase: the task moved to Event.Phase.
	EventPhase EventType = iota + 1
	// EventWaiting: the task stays Pending; Reason and Message say why
	// (the governor's words, or a dependency).
	EventWaiting
	// EventBatchStarted: a batch started (Event.Batch set, Result nil).
	EventBatchStarted
	// EventBatchEnded: a batch ended (Event.Batch and Event.Result set);
	// when it exited 0, ItemsDone and BatchesDone include it.
	EventBatchEnded
)

// Event is one thing that happened to a task, for the reconciler to write.
type Event struct {
	// Type of the event.
	Type EventType
	// Task name.
	Task string
	// Generation of the task the event belongs to: an event of another
	// generation than the one the reader applied is stale.
	Generation int64
	// Phase of the task after the event.
	Phase v1alpha1.Phase
	// Reason and Message (machine-readable and human).
	Reason, Message string
	// Contract held, when any.
	Contract *governor.Contract
	// ItemsDone and BatchesDone after the event.
	ItemsDone, BatchesDone int64
	// Batch concerned, for batch events.
	Batch *Batch
	// Result of the batch, for EventBatchEnded.
	Result *BatchResult
	// Time of the event (the queue's clock).
	Time time.Time
}

// Observer receives the queue's events, in order per task. It must not block
// for long and must not call back into the queue.
type Observer interface {
	Observe(e Event)
}
