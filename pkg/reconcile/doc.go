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
// Status writes are coalesced: a phase change is written at once (after the
// events already queued are applied, so Reserved→Running→Done of a trivial
// task may land as one write); progress alone at most every ProgressInterval
// per task.
//
// Generations. The effective generation of a spec is derived, not trusted
// from the file: status.specHash records the spec the status describes; a
// different hash is a new generation (observedGeneration+1).
//
// What it never does: judge resources (the governor does), order tasks (the
// queue does), or rewrite a file that is not parseable YAML (the spool
// refuses to).
package reconcile
