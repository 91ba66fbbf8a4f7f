// Package queue decides when, and in which order, tasks run, and runs the
// admitted ones batch by batch under the governor's contracts (the seed
// queue-governor-integration.fr.md).
//
// # What it owns
//
//   - The FIFO: pending tasks ordered by (Task.Seq, Task.Name). Seq comes
//     from the task's status, so the order survives a controller restart.
//   - The order between classes (fair.go): a class is a (Task.Account,
//     Task.Priority). While the pending tasks are of one class the scan is
//     the seed's, unchanged. Once they mix (Queue.mu.mixed), or a task at
//     its sequence break is of another class than theirs, a pass walks them
//     by (aged priority, descending; the account's usage per share,
//     share.Ledger.Key, ascending; Seq; Name): within one class the FIFO
//     and its bypass of a Wait hold. A class's priority rises linearly
//     with the wait of its oldest pending task toward the highest priority
//     pending, reaching it after Config.PriorityMaxAge. The first task of
//     the pass told Wait by the governor holds the tasks of other classes
//     after it that rank below it by priority, or by share when its
//     account is below its share, or any once it waited PriorityMaxAge
//     (ranker.holds): they wait, ReasonFairShare, with the numbers, so no
//     task starves behind smaller ones. The parked tails are not used in
//     such a pass.
//   - Accounting (share.Ledger, guarded by Queue.mu): each reservation is
//     booked to its task's account from lockedHold to lockedRelease, each
//     worker from lockedActivate to workerExit. Quotas
//     (Config.Fair.Quotas): a task whose account holds its running-tasks
//     cap waits (ReasonQuota) without asking the governor; a grant that
//     would cross a memory or GPU cap is handed back at once (the one
//     Release outside lockedRelease: the reservation never reached an
//     entry) and the task waits, and so do its account's later tasks in
//     that pass.
//   - Dependencies: a task whose DependsOn are not all Done waits without
//     asking the governor (WaitingForDependencies); a dependency that ended
//     Failed or Rejected holds it (DependencyFailed, naming it; it stays
//     Pending and continues if the dependency is later made Done); an unknown
//     dependency holds it (DependencyMissing); a cycle among pending tasks is
//     Rejected (DependencyCycle, the message names the cycle).
//   - Admission order: one dispatch scan (scanOnce, a synchronous step; Run is
//     a thin loop around it) walks the pending tasks in order, calls
//     Admitter.Refresh once, and asks Admitter.Reserve for each. Only a Wait is
//     bypassed: the next task is asked. Reject ends the task (Rejected); Admit
//     and ReduceBatch hand it, with its reservation, to a worker goroutine.
//     Within one scan, until a reservation is granted, a task whose estimate
//     is one the governor already answered Wait gets that answer without
//     asking again (nothing was reserved since, so the governor's answer is
//     the same), and the Learner is asked each distinct question once (see
//     Learner.Estimate): a thousand identical tasks waiting cost one
//     decision per scan, not a thousand. Each memo keeps at most 16
//     answers per scan (passMemoMax) and, once full, is not looked in for
//     the rest of the scan: when the questions do not repeat, a scan
//     costs about what it costs without one. A scan blocked at MaxParallel
//     leaves alone the tail a scan before it told to wait for a worker
//     (parkedTail), while no pending task was added, replaced, removed,
//     paused or resumed since and none of that tail has dependencies: ten
//     thousand queued tasks cost a scan what its head costs. Likewise for
//     the governor's Wait: a whole scan that ends with a run of tasks
//     asking the same question (no dependency, the same estimate, for a
//     learning task the same learnKey and memory cap), all told to wait
//     with the same answer, parks that run (waitRun); while no pending
//     task changed, a later scan that gets that answer again for a task
//     of the run leaves the rest of it as it is (each would get it too,
//     nothing being reserved since, and holds it already). A task of the
//     run given another verdict meanwhile (a scan at a sequence break)
//     unparks it. A flood waiting for the governor then costs a scan its
//     head, not the flood (BenchmarkScanParked).
//   - Fresh snapshots: when the Admitter is a SnapshotCounter and says its
//     snapshot is stale as a task is handed in (Replace of a new
//     generation, a resume), the scan leaves that task, and every task
//     behind it, without a verdict until a snapshot numbered after its
//     mark (or freshWaitMax, 250 ms): whoever hands tasks in never waits
//     for a probe, and the first admission after an idle spell is decided
//     on the machine as it is.
//   - Waiting: while a task told Wait is pending, Run sleeps at most
//     Config.RescanWait (500 ms); any signal wakes it at once: a release, an
//     Upsert, SetPaused or Remove, a worker exit, or Admitter.Changed closing.
//     The signal is a buffered(1) channel with non-blocking sends. When no
//     Wait is pending, Run sleeps until a signal. There is no other goroutine.
//   - Workers: one goroutine per admitted task (at most Config.MaxParallel when
//     set) runs its batches through BatchRunner, commits progress on exit 0,
//     hands every batch, failed ones included, to the Learner (WithLearner),
//     retries other failures up to Task.Retries times with a clock-driven
//     exponential backoff (RetryDelay: Config.RetryBackoff doubling up to
//     MaxRetryBackoff; the same batch index and start, the same reservation
//     kept), after a MemoryExceeded or a GPUMemoryExceeded (counted apart in
//     Kills) either hands the kill to the Learner and
//     retries the batch under its revised estimate (WithLearner, a task not
//     in strict mode; the task Fails only when that need can never be
//     granted, Decider permitting) or halves the batch cap (through a
//     sequence break, not counted as a retry; at BatchMin the task Fails),
//     and applies pause, resume and cancel to the running batch (a stopped batch is
//     resumed before it is cancelled, so its group sees the SIGTERM). A
//     Start error that may pass (IsTransient: the batch could not be
//     prepared, a full disk) releases the reservation and leaves the task
//     Pending with ReasonPrepareFailed for the backoff (RetryDelay of the
//     failures in a row, no retry spent), then a sequence break asks
//     again; any other Start error fails the task at once, with the
//     error's Reason() when it has one, else StartFailed.
//   - The sequence break between two batches: when the Admitter is a
//     FreshWaiter, wait (no lock held, bounded by the Admitter) for a
//     snapshot taken after the batch ended; then release the reservation,
//     Refresh, offer the budget to the pending tasks ahead of this one in the
//     FIFO (one scan step), then Reserve a fresh contract for the items left,
//     polling every Config.BoundaryPoll (50 ms) while told Wait. In the fair
//     order, "ahead" is ranked before it, each poll offers again, and while
//     a task ranked before it that holds it (ranker.holds) waits for the
//     governor, it does not ask: it yields its next batch (Pending,
//     ReasonFairShare). A running batch is never stopped for fairness.
//     The fresh contract's estimate says Continues: the task's work going on, which the
//     governor's load deferrals (the CPU gate, IO pressure) never hold;
//     they defer new admissions only (memory pressure from outside the
//     batches holds it too: the person at the machine comes first).
//   - Every estimate it hands the governor says how many items the task
//     has left (ItemsLeft: batches are evened out) and how many tasks
//     could run a batch beside it (Peers, lockedPeers: those holding a
//     worker and the ready ones among the first 64 queued, at most
//     MaxParallel): the governor holds a batch to its share of memory. The
//     count is a fact of the queue, not a judgement of resources.
//   - A bounded History of the last Config.HistorySize (64) terminal events,
//     and Snapshot, a point-in-time view of every task (tests read it; get
//     and describe read the manifests, which the reconciler writes).
//   - Learning (WithLearner): every finished batch is handed to
//     Learner.Observe; a task not in strict mode gets its estimate from
//     Learner.Estimate at every admission. The Learner is called with the queue's mutex held (lock
//     order: queue, then Learner, then governor) and never calls back.
//   - Evictions (evict.go): Evict(task, batch, reason, message) kills the
//     running batch (RunningBatch's Kill when it has one, else Cancel) and
//     ends it with the reason whatever the kill made of it; the task goes
//     Pending, released, with its committed progress, no retry spent, no
//     kill counted, its batch cap untouched, and takes a sequence break
//     after RetryDelay of the generation's evictions. The Learner is handed
//     the batch with that reason. A batch that ended before the kill keeps
//     its result. Preemption may reuse it with its own reason.
//
// # What it never does
//
// It never reads RAM, load, pressure or anything of the machine, and never
// judges whether a demand fits: the Admitter does, the queue obeys. It never
// runs a process itself (the BatchRunner does), never reads or writes a
// manifest (the reconciler does, from Events), and never releases a
// reservation twice: lockedRelease is the only call site for an entry's
// reservation and clears the handle it releases (a grant refused by a
// quota is handed back where it was granted, before any entry holds it).
//
// # Phases
//
//	Pending ──admit──▶ Reserved ──first batch──▶ Running ⇄ Paused
//	   ▲                                          │
//	   └── told Wait at a sequence break ◀────────┘ (no reservation held)
//	Running ──last batch──▶ Done; ──past retries / start error──▶ Failed
//	Pending ──Reject, or on a dependency cycle──▶ Rejected
//
// Invariant: a task is Reserved, Running or Paused only while it holds an
// active reservation. At a sequence break the release and the new Reserve
// happen under one hold of the queue's mutex when the governor admits at
// once, so the phase stays Running with the new contract (reported by the
// next EventBatchStarted); when told Wait the task goes Pending (EventPhase
// with the governor's reason) and comes back through Reserved. A pause keeps
// the reservation: Paused while a batch is stopped, or before the next batch
// when paused between batches or while Reserved. A task paused while Pending
// (before admission, or waiting at a sequence break) stays Pending with
// reason Paused: it holds nothing to keep. Close cancels the batches in
// flight; their tasks are reported Pending (reason Shutdown) with their
// committed progress. Drain (a node leaving) dispatches nothing and lets
// each batch in flight end: at its next boundary each worker releases and
// exits, its task Pending (reason Draining) with its committed progress.
//
// The reconciler learns the contract a task holds from EventPhase Reserved
// and from every EventBatchStarted (Event.Contract); an event without a
// contract means none is held.
//
// A task is "running" for Upsert as long as a worker owns it (Reserved,
// Running, Paused, or Pending at a sequence break): Upsert then only takes
// Paused from it, and returns ErrSpecPending when the Generation differs.
//
// # Locking
//
// A worker owns its entry from admission to its exit; an entry is never
// handed to a second worker (a new generation of an ended task gets a new
// entry), so a worker's release can only be its own.
//
// One mutex, Queue.mu, guards the task table, the dispatch list, the entries'
// fields and the history. Lock order: Queue.mu, then the Admitter's own lock
// (Refresh, Reserve, Decide and Release are called with Queue.mu
// held, so decide-and-reserve and the task's phase change are one atomic
// step), and the Observer is called with Queue.mu held, which keeps events in
// order; neither may call back into the queue, and neither may block: no
// probe, exec or file I/O under Queue.mu (Refresh only kicks the prober, and
// a released scratch lease's directory is removed by another goroutine).
// BatchRunner and RunningBatch are never called with Queue.mu held. Helpers
// named lockedX expect Queue.mu held.
//
// # Hardware changes
//
// When Admitter.Changed closes (the governor's hardware generation changed),
// Run re-offers every task Rejected for hardware (HardwareRejection: NoGPU,
// NoScratch, ExceedsCapacity; also one handed as terminal with such a
// Task.TerminalReason): it goes back to Pending, in its FIFO place, through a
// new entry (EventPhase Pending, reason HardwareChanged), unless the
// Admitter is a Decider that still rejects it. InvalidSpec and
// DependencyCycle are not re-offered. Wake lets whoever sees resources freed
// (the prober) make the dispatcher scan at once (hardware.go).
package queue
