// Package history keeps what finished batches measured, per profile, and
// learns each profile's costs from it.
//
// # What it owns
//
//   - Store: the persistent history, one bbolt file in the controller's
//     state directory (FileName). Each profile (a task class and program,
//     or the user's spec.resources.profile) is a bucket of JSON Records
//     keyed by a growing sequence number; each keeps its last MaxRecords
//     and at most MaxProfiles are kept, the profile whose newest record is
//     oldest going first, so the file is bounded. Every Append is one
//     transaction synced before it returns: a kill -9 loses at most the
//     append in flight and never corrupts the store (bbolt writes pages
//     copy-on-write and switches between two meta pages). bbolt's file
//     lock makes one writer per store; a second Open fails with ErrLocked.
//     A file damaged while open makes Append fail with ErrCorrupt (bbolt's
//     panic recovered), one removed or replaced since Open (its inode no
//     longer at the path) with ErrGone: the caller opens a new one.
//   - Fit and Model: a robust fit (Huber, then Tukey bisquare, by
//     iteratively reweighted least squares) of peak = fixed + perItem·items
//   - perThread·threads over the successful batches, costs never
//     negative; batches killed for memory are censored observations (the
//     need was above what they had). Model.Costs adds the residuals'
//     upper quantile and a margin, raises the costs above every kill
//     (bumped as the Kubernetes VPA does, max(+100 MiB, ×1.2), when no
//     batch succeeded since), and caps the batch while the model is not
//     firm (slow start). Too few samples: no firm model; none at all: no
//     costs. Model.Refutes says whether a kill proved stated costs too
//     low, Model.Exceeded by how much the batches of the tasks stating
//     them needed more than they gave (Record.DeclaredBytes; beyond the
//     margin).
//   - GPU memory: a Record also carries the batch's GPU peak, its GPU
//     reservation and whether it was killed for GPU memory; GPURecords
//     turns them into records of their own, fitted by the same Fit
//     (Book.GPUModel), a GPU memory kill a censored observation.
//   - Book: the in-memory records and models, for callers that must not
//     do IO (the queue asks under its lock).
//
// # What it never does
//
// It never reads /proc, a manifest or YAML, and never decides admission:
// the governor decides from the estimate the controller builds with it.
//
// # Locks
//
// Book has one mutex and calls nothing outside the package while holding
// it. Store relies on bbolt's own locking.
package history
