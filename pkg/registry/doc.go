// Package registry is the machine-wide registry of running lardon3d
// controllers. A controller owns the machine's memory budget, so two on
// one machine over-commit it: Acquire refuses a second one by default,
// naming the PID, user and spools of the first. Two controllers that both
// say --share, each with a memory capacity, may run side by side when the
// capacities fit together in the machine's memory. The CLI asks Serving
// which controller serves a spool, or learns that none does.
//
// One controller serves the machine: root's (the system service). A user's
// claim never keeps root's from starting; root's names the users'
// controllers it finds (Held.Beside), and each of them, watching the
// registry (Held.Displaced), stops once root's is registered and it would
// not be admitted beside it. A user's controller beside root's is
// refused, as beside any other.
//
// What it owns:
//   - the registry directories: /run/lardon3d (PrimaryDir), the system's:
//     root's, mode 0755, made so by systemd-tmpfiles or root's controller
//     (one of an older layout, 1777, is made 0755), where root's
//     controllers alone register (in FallbackDir where it cannot be
//     made), so that no user can plant a file or
//     hold the lock there (its registry.lock is mode 0600; one not root's
//     is replaced); /run/lardon3d/users (UsersDir, 1777 like /tmp, made
//     by root only, never by a user), where the other users' controllers
//     register; /dev/shm/lardon3d (FallbackDir, tmpfs, made 1777 by
//     whoever comes first) where UsersDir does not exist. A controller
//     writes only to a directory that is not a symlink, is owned by root
//     or by itself, and is not world-writable without the sticky bit:
//     elsewhere someone else could remove or swap its claim. Every
//     controller and verb reads all three (Dirs). LARDON3D_RUN_DIR (EnvDir),
//     for tests, names the directory a controller registers in: for root
//     (the test suite runs as root) it is the only one read, isolating
//     it; for any other user the standard ones are read all the same, so
//     a user cannot make a second governor beside the system service
//     with it;
//   - the claim files, DIR/controller-PID.json (mode 0644, JSON of a
//     Claim): written under a temporary name, then linked to its own, so a
//     reader never sees it half written. Its controller keeps it open for
//     its whole life holding an exclusive flock; the flock, not the PID,
//     says it is alive: a reader that can take a shared lock on it knows
//     its controller died (kill -9) and skips it. Who a live claim is,
//     the kernel says: its user is the file's owner, whatever its JSON
//     says, and it counts only while the holder of the flock
//     (/proc/locks) is the process it names (its JSON's pid, or its file
//     name's for a file that is not valid JSON), running as the file's
//     owner, a lardon3d controller: the same executable as the reader's,
//     or one whose Go build information names the controller's main
//     package; where the reader may not see the executable (another
//     user's process, read by a controller that is not root), a command
//     line naming lardon3d-controller. Any other locked claim (flock(1),
//     a script, a child that inherited a dead controller's descriptor
//     while it forked) is ignored, never removed. Held.Update
//     rewrites a claim whole (a new locked file renamed over it) when the
//     controller serves a spool it found later; a reader that locks a file
//     whose name was given meanwhile to a new one reads the name again;
//   - DIR/registry.lock (mode 0644: flock needs no write access, and a
//     file nobody else may write cannot be hard-linked by them; 0600 in
//     the system's directory, which only root uses), flocked
//     exclusively by Acquire from its check of the live claims to the
//     write of its own, so that two controllers starting together in one
//     directory are told of each other. Anyone who may read it may hold
//     it, so it is a
//     waiting room, not a gate: after lockWait Acquire publishes its claim
//     without it, then checks the others again (of two controllers
//     registering at that moment both may refuse, never both start).
//     Stale claims and abandoned temporary files are removed there, under
//     this lock only: without it a new claim could take a stale one's name
//     between the check and the removal. What is not a readable regular
//     file (a socket, a directory named as a claim) is skipped;
//   - the rules, pure functions: which claim counts (genuine), who may
//     run beside whom (decide, counts: root's controller counts root's
//     claims only), and when a user's controller is to stop (displacedBy).
//
// What it never does: measure memory (the caller gives the machine's),
// signal or stop another controller (a user's stops itself, seeing
// root's claim), lock spools (package spool does), remove a live claim,
// follow a symlink to a claim or the registry lock, open a claim file
// that is not a regular file, or let a claim whose holder is not the
// controller it names count. It reads /proc/locks and the holders'
// /proc/PID (status, exe, cmdline), nothing else of /proc. It imports no
// other package of this project.
//
// The races that remain: the registry lock is per directory, so two
// controllers registering at the very same moment in two directories
// (a user's in UsersDir, another's in FallbackDir) can both start; root's
// and a user's starting together both start, and the user's stops at its
// next look (Displaced, every 2 s in run). Between users the registry is
// a rule among cooperating users, not a security boundary: a controller
// that is not root judges another user's holder by its command line,
// which that user chooses, so a user can keep another user's controllers
// (never root's) from starting, as anyone can fill /tmp. Root's judgment
// uses the executable itself, and root's claims are files only root can
// make, in a directory only root can write.
//
// Locking: the package has no shared state. A Held's mutex only makes
// Release idempotent and safe from several goroutines. Between processes,
// and between Acquires within one process (flocks belong to open file
// descriptions, so two opens conflict), the flocks above serialize.
package registry
