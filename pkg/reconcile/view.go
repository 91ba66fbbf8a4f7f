package reconcile

import (
	"slices"
	"strings"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

// What a reader of the running host (the web view) sees, safe from any
// goroutine: each accessor takes the lock of what it reads, no owner's
// entry is touched.

// HeldContract is a task's contract in force.
type HeldContract struct {
	// Spool is the task's spool directory; Task its name.
	Spool, Task string
	Contract    governor.Contract
}

// RunningBatch is a batch whose processes run now.
type RunningBatch struct {
	// Spool is the task's spool directory; Task its name.
	Spool, Task string
	// Generation, Index (from 0) and Attempt (from 1) name the batch.
	Generation, Index int64
	Attempt           int
	// Size is its items; Started when it started.
	Size    int64
	Started time.Time
	// Contract is what it runs under.
	Contract governor.Contract
	// MemoryBytes is its memory at its last sample.
	MemoryBytes int64
}

// TaskView is what the host's list index holds of one manifest.
type TaskView struct {
	// Spool is the spool directory; File the manifest's base name.
	Spool, File string
	// StateDir is the spool's state directory, where the task's log is
	// (TaskLogPath).
	StateDir string
	// Row is what get lists of the task.
	Row listing.Row
	// DependsOn is spec.dependsOn.
	DependsOn []string
}

// Budgets is the governor's view of the machine.
func (h *Host) Budgets() governor.BudgetsView { return h.gov.Budgets() }

// Contracts are the contracts in force, by task.
func (h *Host) Contracts() []HeldContract {
	held := h.queue.Held()
	out := make([]HeldContract, 0, len(held))
	for _, x := range held {
		c, name := h.route(x.Name)
		if c == nil {
			continue
		}
		out = append(out, HeldContract{Spool: c.cfg.SpoolDir, Task: name, Contract: x.Contract})
	}
	return out
}

// RunningBatches are the batches running now, in every spool.
func (h *Host) RunningBatches() []RunningBatch {
	var out []RunningBatch
	for _, c := range h.served() {
		out = append(out, c.batches.runningNow(c.cfg.SpoolDir)...)
	}
	return out
}

// Tasks are the tasks of every spool, as the list index holds them: the
// manifests whose current version the controllers know.
func (h *Host) Tasks() []TaskView {
	var out []TaskView
	for _, c := range h.served() {
		out = append(out, c.index.views(c.cfg.SpoolDir, c.cfg.StateDir)...)
	}
	return out
}

// served is a copy of the list of spools' controllers, so that a reader
// holds no lock of the host while it reads each.
func (h *Host) served() []*Controller {
	h.spoolsMu.RLock()
	defer h.spoolsMu.RUnlock()
	return slices.Clone(h.spools)
}

// FinishedBatches are the newest limit (0: all) batches of the learned
// history, every spool's, oldest start first.
func (h *Host) FinishedBatches(limit int) []BatchRow {
	return BatchRows(bookRecords(h.book), limit)
}

// Estimate is what the history says of a profile.
func (h *Host) Estimate(profile string) ProfileEstimate { return EstimateOf(h.book, profile) }

// Records are the finished batches the history keeps of a profile,
// oldest first.
func (h *Host) Records(profile string) []history.Record { return h.book.Records(profile) }

// SpoolDirs are the spools served, in the order added.
func (h *Host) SpoolDirs() []string {
	var out []string
	for _, c := range h.served() {
		out = append(out, c.cfg.SpoolDir)
	}
	return out
}

// views are the index's tasks, of the spool spoolDir whose state
// directory is stateDir.
func (x *listIndex) views(spoolDir, stateDir string) []TaskView {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]TaskView, 0, len(x.live))
	for base, r := range x.live {
		out = append(out, TaskView{Spool: spoolDir, File: base, StateDir: stateDir, Row: r.Row, DependsOn: x.deps[base]})
	}
	slices.SortFunc(out, func(a, b TaskView) int { return strings.Compare(a.Row.Name, b.Row.Name) })
	return out
}

// runningNow are the batches running now, of the spool spoolDir.
func (b *batchRunner) runningNow(spoolDir string) []RunningBatch {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]RunningBatch, 0, len(b.mu.running))
	for rb, qb := range b.mu.running {
		out = append(out, RunningBatch{Spool: spoolDir, Task: qb.Task, Generation: qb.Generation, Index: qb.Index,
			Attempt: qb.Attempt, Size: qb.Size, Started: rb.Started(), Contract: qb.Contract, MemoryBytes: rb.MemoryBytes()})
	}
	return out
}
