// Package share is the fair-share and quota accounting of the queue: who
// (an account: a spool's owner, or the account configured for the spool)
// holds what the governor reserved, and how much of it each account used
// lately, as Slurm's multifactor priority keeps it.
//
// # What it owns
//
//   - Usage: for each account, the reserved memory × time of its
//     reservations, decayed with a half-life (Config.HalfLife, default
//     DefaultHalfLife, 1 h): usage(t) = ∫ held(s) · 2^(−(t−s)/H) ds, kept
//     exactly in closed form at each change (Hold, Release), so the value
//     is the same whichever instants it is read at. A reservation that is
//     held counts from its first second, not at its end.
//   - Shares: each account's weight (Config.Shares, DefaultShares for an
//     account not named). Standing compares an account's fraction of the
//     usage to its fraction of the shares among the accounts given (those
//     that have work): below 1 it used less than its share.
//   - Quotas: caps per account (Config.Quotas) on reserved memory, GPU
//     memory, GPU slots and tasks holding a worker; Over says which cap a
//     new reservation would cross, with the numbers.
//
// # What it never does
//
// It never reads a clock (every call takes now), never decides whether a
// demand fits the machine (the governor does), never orders tasks (the
// queue does, from Key). It has no lock: its owner serializes every call
// (the queue calls it with Queue.mu held).
package share
