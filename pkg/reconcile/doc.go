// Package reconcile joins the spool, the queue and the governor: it maps
// manifests to queue tasks and writes every transition back into the
// manifest's status block.
//
// The host (host.go). One process governs the machine: a Host holds what
// the spools it serves share, the governor, the prober, the queue (one
// arrival order: QueueSeq numbers are handed out across spools), the
// learned history (one book, one store at Config.HistoryPath, fed by the
// first spool's goroutine) and the scratch leases; each spool added keeps a
// Controller of its own, with its own goroutine, entries, state directory,
// index and logs. The queue knows the tasks of the n-th spool (n > 0) by
// a prefix "n\x1f" (names never hold control characters), so dependencies
// resolve within a spool; the host routes the queue's events and batches
// back to their spool's controller without it. Host.Run prepares every
// spool (killing what a crashed controller left) before the queue runs,
// stops every spool's loop, closes the queue, waits for every batch, then
// lets each controller write what is left. New serves one spool.
//
// Holds (holds.go). A hold is a reservation with no batch, asked over the
// control socket (package control) by a user's program (exec): Host.Hold
// reserves it from the governor like a batch's (so no batch is admitted
// into its memory), waits (retried every 250 ms, at once when a
// reservation is released or a snapshot frees memory) until granted, and
// hands a release that returns it exactly once. While a hold waits, the
// machine decides each batch as if the waiting holds' memory, GPU memory
// and GPU slots came with it (holdBook.gate): a batch that would leave
// them no room waits (its reason's numbers then include the holds), so a
// stream of batches never starves the person at the machine.
//
// Leaving (leave.go). A spool a Join added may leave the running host
// (Host.Leave): its owner goroutine refuses while one of its tasks holds
// a batch, else takes its tasks out of the queue and ends its loop; the
// host then counts the loop as gone, and the spool's statuses are written
// and its journal closed as at a stop (finish). Its index stays taken
// (queue names carry it), its report counts as settled and ready. The
// first spool never leaves (the history is persisted through it).
//
// Users. A controller running as root runs the batches of a spool another
// user owns as that user (spoolUser: uid, gid, groups and HOME from the
// passwd database, runner.Spec.User), never as root: the spool accepts only
// that user's files and root's, and a root-owned file in a user's spool may
// have been planted there. Their items must be readable by the user
// (resolveItems), their scratch lease directory is handed to them.
//
// Accounts and priorities (priority.go, shares.go). Every task of a spool
// is charged to the spool's account (Config.Account, else its directory's
// owner's login name, spoolAccount) for the queue's fair share and
// quotas; spec.priority resolves by Config.PriorityClasses (a class not
// named rejects a new generation, InvalidSpec; a resumed one takes
// DefaultPriority). Each spool's state directory gets the accounts'
// standings (shares.json, every 2 s beside budgets.json) for the shares
// verb and describe.
//
// Files. controller.go holds the wiring and the loop; config.go the
// Config; tasks.go the task table (entries by path, names, duplicates,
// dependents, invalid files); lifecycle.go the lifecycle rules as pure
// functions (decideFile: what a new version of a manifest asks of its
// task; carriedProgress and resumedProgress; projectEvent: what a queue
// event makes of a status), which generations.go (file events, the
// generations) and events.go (inbox notes, queue events, setPhase,
// write hand-offs) carry out; statuswriter.go, duewrites.go and
// flushlimit.go the status writer; settle.go the exit rule and the phase
// gauge; recovery.go and groups.go what a crash leaves; items.go who runs
// a spool's tasks, which items they may read, and the resolver; publish.go
// the side files; view.go what a reader of the running host (the web
// view) sees, and eta.go when a task should be done (get, describe and the
// view price it alike).
//
// Ownership. One goroutine per spool (Controller.loop) owns every entry:
// the parsed manifest and the authoritative in-memory status. Spool
// events, queue events, process-group notes, write outcomes and the
// progress a running batch reports (runner.Spec.OnProgress:
// status.lastBatch.itemsReported, written at the progress pace, never
// committed) all arrive on channels or on the inbox and are applied by
// that goroutine only, so entries need no lock. It does no status I/O,
// never waits for a probe, and resolves no items: a goroutine per spool
// (the resolver, items.go) globs a task's items and stats each one (the
// input bytes per item), and answers on the inbox; a generation starts,
// or a task resumes, when the answer for its current spec comes (an edit
// meanwhile supersedes the request: its answer is dropped), so a pattern
// over ten thousand files holds up no event. A task whose items are on
// their way is not settled. The queue dispatches nothing until every
// spool's first listing is in it: after the spool's Synced event the owner
// sends a mark through the resolver, behind the listing's own requests,
// and the host starts the queue once each spool's mark came back (or the
// spool was lost), as an informer's workers start once its cache is
// synced; a first decision made on a partial listing would hold its
// batch to no share of memory. A glob that matches nothing while one of the
// task's dependencies is not Done does not reject the task: it waits
// Pending (DependenciesReady=False) and is resolved again each time a
// dependency ends Done (deferItems), since it often globs their outputs.
// The batch adapter (batches.go) keeps its own small mutex-guarded table of
// what a batch needs (command, items, log path), written by the owner and read
// by the queue's workers, and starts each batch through Deps.Executor
// (runner.Processes by default; the node agent's runs Pods): neither the
// queue nor the owner knows which. A batch that is no process group of
// this machine (a Pod) is not journaled.
//
// Status writes (statuswriter.go) run on a goroutine of their own per
// spool, as kubelet's status manager syncs pod statuses apart from its
// sync loop: at the end of each pass the owner hands the writer a copy of
// every status that changed, numbered (a version), without blocking; the
// writer owns when each is due, the write limit, the group commit and the
// backoff, and reports each write's outcome back on the inbox (which
// version landed, for settling and get's rows; which failed, for the
// file whose status can never be written). A write that hangs (a stuck
// file system, an API call up to its timeout in node mode) delays no
// spool event. The writer tells the batch adapter which progress a
// written status commits (batchRunner.noteCommitted).
//
// Status writes are coalesced: the end of a batch (the commit point of its
// items) is written at once, with the events already handed; a
// phase change within PhaseWriteDelay (10 ms), so that the
// Reserved→Running→Done of a short task lands in one write; other
// changes (a batch starting, a new reason to wait) at most every
// ProgressInterval (250 ms) per task; a wait whose reason stays while the
// numbers of its message move (a load or pressure gate, the free memory)
// is kept in memory at once but written at most every 10 s per task, and
// logged only when its reason changes; the first status of a new manifest
// that is only queued (waiting for a worker at most) waits up to
// QueuedWriteDelay (3 s), so that a short task is written once, when it
// runs, and these first statuses go out 64 at once, then 20 a second,
// oldest first (queuedwrites.go), so that a flood run faster than that
// is written once per task too. Measured batches reach the history store every 250 ms at most,
// one transaction for all. The owner takes every spool event and inbox
// note already waiting before it hands the writes, and the writes due
// together are one group commit (spool.Spool.WriteStatuses: one syncfs,
// one directory fsync), so a flood of short tasks costs one write per
// pass, not one per task. A write that fails stays due and is
// retried with backoff (queue.RetryDelay: 100 ms doubling to 10 s), a
// commit point included, until it lands; meanwhile it is logged, counted
// (lardon3d_status_write_duration_seconds{result="error"}) and published in
// STATE/status-write-errors.json, which describe shows. A new version of a
// file whose status block differs from the controller's (a writer that
// replaced the whole file) gets the controller's status back, and at
// shutdown every status is re-applied onto its file's current version
// (the writer writes every status it holds once more, then stops).
//
// One writer pass writes at most flushMax (64) statuses, committed
// progress first, then phase changes, oldest first (flushlimit.go). A
// pass finds what is due in a queue ordered by due time (duewrites.go),
// not by walking every dirty status: thousands of queued tasks waiting
// for QueuedWriteDelay cost nothing per event.
//
// The list index (index.go). For the listings the running controller
// serves (package listing: its socket, STATE/get.sock, is opened by the
// command beside the controller), the owner keeps one row per manifest
// whose current version it knows: the version a spool event reported
// (valid ones only), then each status it wrote into it. The row is the
// task's listing.Row, what get's table reads, and the version of the file
// it describes (inode, size, modification time); a listing takes a row
// only while the file is still that version, and reads every other
// manifest itself. Listings read the rows on their own goroutines
// (Controller.IndexedRow, the controller's listing.Rows); the owner
// stores and drops them under listIndex.mu, each row never changed once
// stored. Nothing of it is written to a file.
//
// Phases. setPhase is the only place the controller changes a status
// phase, through v1alpha1.TaskStatus.SetPhase; it refuses, logs as a bug
// and counts (lardon3d_phase_transitions_refused_total) any transition
// v1alpha1.AllowedTransition forbids.
//
// Generations and edits, one rule (decideFile), the same with or without
// a restart:
//
//   - spec.paused applies at once, whatever the phase;
//   - any other edit of a task no worker holds (not started, waiting for
//     admission or dependencies, Done, Failed, Rejected) is the next
//     generation at once;
//   - an edit while a worker holds the task (Reserved, Running, Paused, or
//     between two batches, even when told to wait there) waits under
//     SpecApplied=False, SpecChangePending, and becomes the next generation
//     the moment the current one ends, Done included; unless a restart is
//     asked (a new spec.restartToken, written by the restart verb and left
//     out of the spec hash): a valid waiting edit is then the next
//     generation at once, the queue's Replace (queue.Task.Restart)
//     cancelling the batch in flight as Remove does (its items not
//     committed; the new batch starts once its processes are gone). A
//     restart with no edit waiting, or of an invalid edit, changes
//     nothing;
//   - committed progress carries over to the next generation only when the
//     previous one did not end Done and its items and working directory are
//     unchanged (status.progress.inputsHash). A spec changed while no
//     controller ran counts as an edit that waited for its generation to
//     end: progress carries over only from a Failed or Rejected one;
//   - a Done task that runs again (an edit, or a rejection of its edited
//     spec) re-runs its Done dependents after it, which say why in their
//     Rerun condition; so does a Done task found, at start-up, depending on
//     a task that is not Done.
//
// A generation is applied whole or not at all: the batch adapter records
// what the new generation's batches need under its generation number, the
// queue takes it in one Replace (or refuses with ErrSpecPending, and
// nothing else changes), and only then is the status updated. Every queue
// event names its generation; events of another generation than the one
// the status describes are stale and ignored. What is active is the
// queue's answer (Holds, Replace), not the phase last written.
//
// The state directory is trusted only when it is the controller's alone
// (trust.OwnDir, at start, for it and its logs and run directories): the
// controller writes there by path. A task's log is STATE/logs/NAME.log
// (tasklog.go: TaskLogPath, the one rule every reader follows, and
// OpenTaskLog, which reads through no link): status.logFile, written for
// people, is the manifest writer's to change and is never opened; a
// finished task's that is not the controller's is put right at start.
//
// Crash safety. Before the queue hears of a batch, the batch adapter records
// its process group (pgid, start time, boot id, and its cgroup when
// Deps.Cgroups is set) as a line of the journal STATE/run/groups.jsonl, and
// appends its end once the group is gone (groupJournal). Run starts by
// killing every group started and not ended (and every group a controller
// of an earlier version left in STATE/run/TASK/group-PGID.json) and
// everything left in a batch cgroup under the subtree (without cgroups:
// every process of this user carrying the state directory), then
// resumes each task from its committed progress:
// reservations live only in memory, so none leaks. At most the batch in
// flight at the crash runs again, and the batches whose end was not
// written yet; with Config.CommitBeforeNextBatch (the node agent) a batch
// starts only once the status committing the items before it is written
// (batchRunner.waitCommitted), so only the batches in flight.
//
// The effective generation of a spec is derived, not trusted from the
// file: status.specHash records the spec the status describes; a different
// hash is a new generation (observedGeneration+1).
//
// Learning (learn.go, estimates.go). The queue's Learner records every
// finished batch in an in-memory history.Book at once (under the queue's
// mutex, no IO) and pushes it on the inbox; the owner goroutine appends
// what it gathered to STATE/history.db (history.Store) in one transaction
// per inbox drain, and publishes every profile's model in
// STATE/estimates.json every 2 s when it changed (the store is locked
// while the controller runs; the estimates and describe verbs read that
// file, else the store). A store that cannot be opened leaves learning
// in memory; one bbolt finds invalid is moved aside, never deleted. The
// one rule: a stated resources block is the contract (declared), raised
// only when the batches of tasks stating it needed more or a kill refuted
// it; with
// estimate: learned, or no memory stated, the profile's model gives the
// costs (once it has MinSamples batches when costs are stated too); with
// nothing known, batch.min runs under a provisional reservation
// (Config.ProvisionalFraction of the grantable memory, clamped to what is
// free, never 0 B), and batches grow as the model firms up. A batch
// killed for memory, declared or learned, is retried under the measured
// need, bumped, with an EstimateTooLow condition; estimate: strict keeps
// halving and failing at batch.min. GPU memory follows the same rule
// from the profile's GPU model (history.GPURecords): a batch the runner
// stopped as GPUMemoryExceeded (its processes measured through the probe,
// Deps.GPUMemory) is retried under its measured GPU need, bumped. Lock
// order: queue, book, governor.
//
// The machine. One prober goroutine (prober.go) is the only caller of the
// probe: it hands the governor a snapshot at start, every ProbeInterval
// (200 ms; every 2 s while the queue holds no task pending or holding a
// worker, Queue.Busy) and soon after a kick (at most every 20 ms). A task
// handed to the queue (a new generation, a resumed one, an unpause) while
// the prober is at its idle pace waits in the queue, not in the owner, for
// a snapshot taken after it came (queue.SnapshotCounter: the machine
// passes on the prober's FreshMark, which kicks a probe and wakes the
// queue once it is taken; at most 250 ms). The queue's
// Admitter (machine.go) turns Refresh into that kick, a non-blocking send on
// a buffered(1) channel, so a scan or a sequence break decides on a snapshot
// at most ProbeInterval old and the next decision on a fresh one; a snapshot
// the governor says freed resources wakes the queue at once (Queue.Wake),
// and a hardware change reaches it through Admitter.Changed, which also
// re-offers the tasks rejected for hardware. A task a previous controller
// rejected for hardware is handed to the queue with its reason and its
// items (hardware.go), so the outcome does not depend on a restart.
//
// Memory pressure (pressure.go). After each snapshot the prober runs the
// evictor's step on its own goroutine: at governor.PressureHard it lists
// every spool's running batches (taking each batch adapter's mutex in
// turn, after spoolsMu), picks one by governor.ChooseVictim and asks
// queue.Evict, naming the largest processes outside the batches
// (probe.TopProcesses, within the cgroup whose limit bounds the
// controller, Deps.MemoryDomain, else the machine's);
// one eviction at a time, the next once the victim is gone and
// evictSettle (2 s) passed. lifecycle.go turns the evicted batch's end
// into condition Evicted. The governor's soft level holds admissions.
//
// Scratch leases. The governor names a lease's directory; the batch adapter
// creates it (package scratch) before the batch starts, the machine hands it
// for removal when the reservation is released, and Run removes what a
// crashed controller of the same spool left before anything runs.
//
// Locking. Lock order, outermost first: Queue.mu → Host.spoolsMu →
// Host.mu; Queue.mu → Governor.mu, inbox.mu, scratch.Leases.mu,
// prober.mu, holdBook.mu (each a leaf; Host.Hold takes the book's and
// the governor's one at a time, never the queue's); batchRunner.mu → runner's Batch.mu
// (workMemory); statusWriter.mu (a leaf); Host.historyMu (a leaf but for
// the book's own lock, held across the store's IO: appendHistory). Host.spoolsMu guards the list
// of spools and Run's bookkeeping of their loops; the queue's router
// (route, with Queue.mu held), the prober (workMemory, then
// batchRunner.mu) and the learner (persist) take it to read; Add and Join
// to append, never calling the queue or doing IO under it (Join prepares
// a spool first). Host.mu guards only the per-spool reports (phase
// counts, readiness, settled, listed). The owner goroutine holds no lock of its
// own but listIndex.mu (only while it stores or drops a list row); it
// calls the queue (which takes Queue.mu, then the governor's), never
// while holding the batch adapter's mutex, which guards only its tables
// and is never held across a call out. Queue events and write outcomes
// reach the owner through the inbox (its mutex guards only the slice),
// so neither the queue nor the writer waits for the owner, and the owner
// hands the writer its requests under statusWriter.mu, which guards only
// their slice. The prober holds no lock across the probe: it calls the
// SnapshotFunc, batchRunner.workMemory and Governor.Update one after the
// other. No lock of the queue or of this package is ever held across a
// probe, an exec or a file write: the machine's methods only touch the
// governor, the prober's counters and non-blocking hand-offs;
// batchRunner.Start (which writes the items, group and lease files) runs
// on a queue worker without Queue.mu. The host's read accessors
// (view.go) take one lock at a time: Queue.mu (Held), then Host.spoolsMu
// to route each name; or Host.spoolsMu to copy the list of spools, then,
// released, each spool's listIndex.mu or batchRunner.mu.
//
// What it never does: judge resources (the governor does), order tasks (the
// queue does), or rewrite a file that is not parseable YAML (the spool
// refuses to).
package reconcile
