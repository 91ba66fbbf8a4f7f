// Package reconcile joins the spool, the queue and the governor: it maps
// manifests to queue tasks and writes every transition back into the
// manifest's status block.
//
// Ownership. One goroutine (Controller.Run) owns every entry: the parsed
// manifest, the authoritative in-memory status and the write schedule. Spool
// events, queue events and process-group notes all arrive on channels or on
// the inbox and are applied by that goroutine only, so entries need no lock.
// The batch adapter (batches.go) keeps its own small mutex-guarded table of
// what a batch needs (command, items, log path), written by the owner and read
// by the queue's workers.
//
// Status writes are coalesced: the end of a batch (the commit point of its
// items) is written at the next flush, after the events already queued; a
// phase change within PhaseWriteDelay (10 ms), so that the
// Reserved→Running→Done of a short task lands in one write; other
// changes (a batch starting, a new reason to wait) at most every
// ProgressInterval (250 ms) per task.
//
// Crash safety. Before the queue hears of a batch, the batch adapter records
// its process group (pgid, start time, boot id) in STATE/run/TASK/group-PGID.json
// and removes the file once the group is gone. Run starts by killing every
// group still on record, then resumes each task from its committed progress:
// reservations live only in memory, so none leaks. At most the batch in
// flight at the crash runs again.
//
// Generations. The effective generation of a spec is derived, not trusted
// from the file: status.specHash records the spec the status describes; a
// different hash is a new generation (observedGeneration+1).
//
// The machine. One prober goroutine (prober.go) is the only caller of the
// probe: it hands the governor a snapshot at start, every ProbeInterval
// (200 ms) and soon after a kick (at most every 20 ms). The queue's
// Admitter (machine.go) turns Refresh into that kick, a non-blocking send on
// a buffered(1) channel, so a scan or a sequence break decides on a snapshot
// at most ProbeInterval old and the next decision on a fresh one; a snapshot
// the governor says freed resources wakes the queue at once (Queue.Wake),
// and a hardware change reaches it through Admitter.Changed, which also
// re-offers the tasks rejected for hardware. A task a previous controller
// rejected for hardware is handed to the queue with its reason and its
// items (hardware.go), so the outcome does not depend on a restart.
//
// Scratch leases. The governor names a lease's directory; the batch adapter
// creates it (package scratch) before the batch starts, the machine hands it
// for removal when the reservation is released, and Run removes what a
// crashed controller of the same spool left before anything runs.
//
// Locking. The Run goroutine holds no lock. Lock order, outermost first:
// Queue.mu (the queue calls the machine, and the observer that pushes onto
// the inbox, with it held) → Governor.mu, inbox.mu, scratch.Leases.mu (each a
// leaf); batchRunner.mu → runner's Batch.mu (workMemory). The prober holds
// no lock across the probe: it calls the SnapshotFunc, batchRunner.workMemory
// and Governor.Update one after the other. No lock of the queue or of this
// package is ever held across a probe, an exec or a file write: the machine's
// methods only touch the governor and non-blocking hand-offs, batchRunner.Start
// (which writes the items, group and lease files) runs on a queue worker
// without Queue.mu, and status writes happen on the Run goroutine.
//
// What it never does: judge resources (the governor does), order tasks (the
// queue does), or rewrite a file that is not parseable YAML (the spool
// refuses to).
package reconcile
