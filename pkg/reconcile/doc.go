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
// What it never does: judge resources (the governor does), order tasks (the
// queue does), or rewrite a file that is not parseable YAML (the spool
// refuses to).
package reconcile
