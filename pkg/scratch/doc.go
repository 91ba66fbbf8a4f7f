// Package scratch makes the governor's scratch leases real on disk: one
// directory per lease, on the lease's volume, created before the lease's
// first batch starts and removed once the lease is released; what a crashed
// controller left is removed when the next one starts.
//
// # Names
//
// The governor names a lease's directory VOLUME/PREFIX+ID-NONCE (NONCE 16
// random hex digits: nobody can make it in advance), where ID is the
// reservation id (it restarts at 1 with every governor). Leases.Prefix is
//
//	lardon3d-lease-OWNER-TOKEN-
//
// where OWNER is 8 hex digits of a hash of the controller's identity (its
// absolute spool directory: one controller per spool, by the spool's lock)
// and TOKEN 16 random hex digits drawn when the Leases is made. Names are
// therefore never reused across restarts, and a controller recognises its
// own leftovers exactly: RemoveLeftovers removes, in each volume, only the
// directories named lardon3d-lease-OWNER-<16 hex>-<digits>[-<16 hex>] whose token is
// not its own. Another controller's leases (another owner) and anything
// else on the volume are never touched.
//
// # What it must never do
//
// Decide anything (the governor grants leases), or remove a path whose base
// name does not start with lardon3d-lease-. Removal can take long (a lease
// may hold many files), so Release never removes anything itself: it hands
// the path to the goroutine of Run and returns at once, and may be called
// with any lock held (the queue releases under its mutex).
//
// # Concurrency and lock order
//
// Leases.mu guards the list of directories waiting for removal; it is a
// leaf: nothing else is locked, and no file is touched, while it is held.
package scratch
