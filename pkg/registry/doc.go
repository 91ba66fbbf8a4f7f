// Package registry is the machine-wide registry of running lardon3d
// controllers. A controller owns the machine's memory budget, so two on
// one machine over-commit it: Acquire refuses a second one by default,
// naming the PID, user and spools of the first. Two controllers that both
// say --share, each with a memory capacity, may run side by side when the
// capacities fit together in the machine's memory. The CLI asks Serving
// which controller serves a spool, or learns that none does.
//
// What it owns:
//   - the registry directories (Dirs): the value of LARDON3D_RUN_DIR alone
//     when set; else /run/lardon3d, used where it exists and is writable
//     or can be created (by root), and /dev/shm/lardon3d (tmpfs,
//     world-writable on every Linux) for the controllers that cannot use
//     it. A directory it creates gets mode 1777, like /tmp, so that every
//     user's controller registers in it. It writes only to a directory
//     that is not a symlink, is owned by root or by itself, and is not
//     world-writable without the sticky bit: elsewhere someone else could
//     remove or swap its claim. It reads every candidate that exists, so
//     root's controller and a user's that had to fall back see each other;
//   - the claim files, DIR/controller-PID.json (mode 0644, JSON of a
//     Claim): written under a temporary name, then linked to its own, so a
//     reader never sees it half written. Its controller keeps it open for
//     its whole life holding an exclusive flock; the flock, not the PID,
//     says it is alive: a reader that can take a shared lock on it knows
//     its controller died (kill -9) and skips it. Who a live claim is,
//     the kernel says: its user is the file's owner, its PID the holder of
//     the flock (/proc/locks), whatever its JSON says; a locked file that
//     is not valid JSON is named by its file name and owner. Held.Update
//     rewrites a claim whole (a new locked file renamed over it) when the
//     controller serves a spool it found later; a reader that locks a file
//     whose name was given meanwhile to a new one reads the name again;
//   - DIR/registry.lock (mode 0644: flock needs no write access, and a
//     file nobody else may write cannot be hard-linked by them), flocked
//     exclusively by Acquire from its check of the live claims to the
//     write of its own, so that two controllers starting together in one
//     directory are told of each other. Anyone may hold it, so it is a
//     waiting room, not a gate: after lockWait Acquire publishes its claim
//     without it, then checks the others again (of two controllers
//     registering at that moment both may refuse, never both start).
//     Stale claims and abandoned temporary files are removed there, under
//     this lock only: without it a new claim could take a stale one's name
//     between the check and the removal. What is not a readable regular
//     file (a socket, a directory named as a claim) is skipped;
//   - the rules of who may run beside whom (decide, a pure function).
//
// What it never does: measure memory (the caller gives the machine's),
// signal or stop another controller, lock spools (package spool does),
// remove a live claim, follow a symlink to a claim or the registry lock,
// or open a claim file that is not a regular file. It imports no other
// package of this project.
//
// The races that remain: the registry lock is per directory, so two
// controllers registering at the very same moment in two different
// directories (one in /run/lardon3d, one that had to fall back to
// /dev/shm/lardon3d) can both start; and a controller killed while it
// forks a batch leaves, for the few milliseconds before the child's exec,
// a child still holding the claim's descriptor (it is close-on-exec), so
// a controller started in those milliseconds is refused as if the dead one
// still ran. The registry is a rule among cooperating users, not a
// security boundary: in a world-writable directory anyone can plant a
// locked claim and so keep controllers from starting, as anyone can fill
// /tmp. A user who cannot create /run/lardon3d and finds /dev/shm/lardon3d
// owned by another user has no directory to register in; root can create
// /run/lardon3d at boot (systemd-tmpfiles: "d /run/lardon3d 1777 root
// root -").
//
// Locking: the package has no shared state. A Held's mutex only makes
// Release idempotent and safe from several goroutines. Between processes,
// and between Acquires within one process (flocks belong to open file
// descriptions, so two opens conflict), the flocks above serialize.
package registry
