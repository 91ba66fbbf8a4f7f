// Package governor is the only owner of the machine's budgets: RAM, GPU
// memory and GPU slots, CPU threads, IO slots and scratch disk. It turns a
// task's Estimate into a Decision and, atomically, into a Reservation whose
// Contract is exactly what the worker may use.
//
// # What it owns, what it never does
//
// The governor is pure bookkeeping. It is handed Snapshots of the machine by
// a probe (pkg/probe) through Update and never opens /proc, /sys, a file or
// YAML, never starts a goroutine and never sleeps. Time comes from an
// injected clock (WithClock). It never revokes a granted reservation: a
// snapshot that shrinks a budget only makes new demands wait.
//
// # API
//
//   - New(Config, ...Option): budgets bounded by configuration, like Slurm's
//     RealMemory or the kubelet's system-reserved. Zero fields take defaults
//     (see Config); negative ones mean none.
//   - Update(Snapshot) bool: the machine's state. The generation is bumped,
//     and every channel from Changed is closed, when the hardware registry
//     changes (first snapshot, GPU or scratch volume seen, gone, resized or
//     becoming (un)measurable, cgroup memory limit, memory capacity or usable
//     CPUs changed). It reports whether the snapshot freed resources (RAM,
//     VRAM or scratch headroom up by max(64MiB, 1% of capacity), or a
//     deferral ended), so that the caller may wake the queue at once.
//   - Decide(Estimate) Decision: an observation, perishable, no reservation.
//   - Reserve(Estimate) (Decision, Reservation, bool): decide and reserve
//     every budget at once under the mutex, all or nothing.
//   - Release(Reservation): exactly once. Ids grow monotonically, so a
//     reservation that was issued (id < next id) and is not active is its own
//     tombstone: a second Release returns ErrAlreadyReleased and changes no
//     counter, without any per-reservation memory kept. Scratch leases go
//     with their reservation. A lease's directory is named
//     VOLUME/PREFIX+id (WithLeasePrefix; the controller makes the prefix
//     unique across restarts); the governor only names it, package scratch
//     creates and removes it.
//   - Budgets: a copy of every budget and signal, for the CLI and metrics.
//   - Close: destroys the remaining reservations; every later call returns
//     ErrClosed (Decide and Reserve answer Wait with reason Closed, so a
//     shutting-down queue never marks a task Rejected).
//
// # Decisions
//
// A decision is a small enum (Admit, ReduceBatch, Wait, Reject), a reason
// from a closed set, the budget that ran short and its numbers. "Does not
// fit" is a decision, never an error. Messages are formatted on demand by
// Decision.Message, so deciding never allocates. The checks run in order:
//
//  1. Closed → Wait Closed; invalid estimate → Reject InvalidEstimate;
//     no snapshot → Wait NoSnapshot.
//  2. Demands that can never fit, even with no reservation at all → Reject:
//     minThreads above the usable CPUs, IO or GPU slots above their totals,
//     memory at (batch.min, minThreads) above capacity − margin, GPU memory
//     above every GPU's memory − margin (ExceedsCapacity); a GPU demand with
//     no GPU (NoGPU); a scratch demand with no scratch volume (NoScratch).
//     A GPU or scratch volume present but unmeasurable (GPU.Known false,
//     ScratchVolume.Unknown) is never a reason to reject: unknown
//     availability waits (GPUUnknown, ScratchUnknown).
//     Overflowing demands are ExceedsCapacity.
//  3. Deferrals of new admissions: where the snapshot has PSI, CPU
//     pressure above CPUPressureThreshold percent (CPUPressure), measured
//     from the cumulative stall time over the last second in which the
//     active reservations left usable CPUs free (pressureWindow: the
//     governor's own full use of the CPUs is not a reason to wait; avg10
//     when the total is unknown); else the load average, less the threads
//     of the active reservations (the governor's own work), above
//     LoadThreshold × CPUs (LoadHigh). This is the CPU gate; a negative
//     LoadThreshold or CPUPressureThreshold turns it off. Its wait is
//     bounded while no reservation is active: once CPUGateMaxWait (30s)
//     has passed since the first Reserve it held back with none active,
//     it lets demands through whatever the signal, until a grant (a busy
//     machine slows admissions, never starves them; with a reservation
//     active the gate holds new ones back however long, as HTCondor's
//     desktop policy and GNU parallel's --load do; the next demand after
//     the last release waits the bound again). Decide reads the bound and
//     never starts it. PSI io some avg10 above IOPressureThreshold for
//     demands holding IO slots (IOPressure). Memory pressure from outside
//     the batches (pressure.go): available memory under
//     MemoryPressureSoft (default the margin) holds every demand
//     (MemoryPressure, with the memory the other programs use:
//     capacity − available − WorkMemoryUsage); Pressure tells the caller
//     PressureHard under MemoryPressureHard (default half the soft one)
//     or with swap falling faster than SwapFallRate, and ChooseVictim
//     is the one rule for the batch to evict (the governor evicts
//     nothing itself). A deferral ends only after
//     its signal stayed at or below the threshold for Config.Hysteresis,
//     measured on the injected clock from the first snapshot back below.
//     Deferrals hold new admissions only: an estimate that Continues (a
//     task's next batch, its work going on) skips this step, as the
//     deferrals never revoke work already granted. The decision carries
//     what the demand waits for and until when at most (Hysteresis,
//     BelowSince, GateUntil).
//  4. Slots and scratch (NoIOSlot, NoGPUSlot, NoScratch; ScratchUnknown when
//     no measured volume has room but an unmeasurable one is present; a
//     lease is only granted on a measured volume), then CPU: threads
//     are a budget, usable = CPUs − reserved CPUs; free < minThreads →
//     Wait NoFreeCPU.
//  5. Memory and GPU memory (InsufficientMemory, InsufficientGPUMemory,
//     GPUUnknown when only unmeasurable GPUs remain). Threads granted =
//     min(wished, free threads), lowered towards minThreads only when
//     batch.min does not fit; the batch is then the largest n in [min, max]
//     with fixed + perItem·n + perThread·threads within every budget,
//     computed by division, then evened out over the estimate's ItemsLeft
//     (evenBatch: as many batches as n would take, of equal sizes, never
//     under min). A task without GPU demand whose Estimate.Peers says k
//     batches could run side by side (k = min(Peers, usable CPUs ÷
//     minThreads) >= 2) and whose batch would need more than a 1/k share
//     of the grantable memory is held to that share (shareCap), unless
//     its learned duration (BatchTime, ItemTime) says k shared batches
//     process items slower than full ones; the contract then says so
//     (Share). Admit when n is max (evened out) and threads = wished,
//     else ReduceBatch.
//
// A GPU demand holds at least one GPU slot. On a unified-memory GPU its GPU
// costs join the RAM costs in the RAM envelope; on a dedicated GPU they go
// to that GPU's VRAM budget (total, or free if lower, minus its margin and
// reservations). Among several GPUs the one giving the largest batch wins.
// Swap and zram are reported in Budgets and never counted as RAM.
//
// # The RAM rule
//
// Let capacity = min(MemTotal, cgroup limit, Config.MemoryCapacity),
// available = min(MemAvailable, cgroup limit − cgroup usage), reserved the
// sum of active reservations and inUse the snapshot's WorkMemoryUsage
// (resident memory of our own running batches) clamped to [0, reserved]:
//
//	free = min(capacity − margin − reserved,
//	           available − margin − (reserved − inUse))
//
// The first term never over-commits the capacity. The second reacts to
// memory used outside the controller. The kernel already subtracted from
// MemAvailable what our running batches use, so only the part of the
// reservations not yet in use (reserved − inUse) is subtracted again: no
// double count when the caller measures inUse. When it does not (inUse = 0)
// the rule is exactly the min(MemAvailable, physical, cgroup) −
// margin − reservations: safe, but running work is counted twice, so the
// machine is under-used until WorkMemoryUsage is filled.
//
// Example: 16GiB, margin 1GiB, one batch reserved 6GiB and uses 5GiB,
// foreign processes use 2GiB, so MemAvailable ≈ 9GiB. Capacity term:
// 16 − 1 − 6 = 9GiB. Available term with inUse = 5GiB: 9 − 1 − 1 = 7GiB,
// which is the truth (16 − 1 − 6 − 2). With inUse unknown: 9 − 1 − 6 = 2GiB.
//
// # Lock
//
// One mutex, Governor.mu, guards every mutable field, grouped in the
// struct `mu struct{ sync.Mutex; ... }`. Helpers that expect it held are
// named lockedX and say REQUIRES: g.mu held. The governor calls nothing
// outside itself while holding it, so it has no lock order with other
// packages. Running totals (reserved memory, threads, slots, per-GPU and
// per-volume bytes) make Decide and Reserve O(GPUs + volumes), independent
// of the number of active reservations; active reservations live in a
// slice-backed slot table with a free list, so reserve and release do not
// allocate in steady state.
package governor
