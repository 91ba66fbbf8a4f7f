// Package cgroup gives each batch a control group of its own, so that the
// kernel, not a sampler, holds the batch to its memory contract and knows
// every process the batch started, however it forks or detaches.
//
// What it owns:
//   - discovery: the cgroup hierarchies mounted (from /proc/PID/mountinfo)
//     and the controller's own cgroups (from /proc/PID/cgroup). cgroup v1 is
//     used when a v1 hierarchy carries the memory controller (memory, and
//     freezer and pids where they are mounted), else cgroup v2 when the
//     unified hierarchy offers memory;
//   - the subtree: one directory per hierarchy, Options.Name under the
//     parent (Options.Parent, or the controller's own cgroup). On v2 the
//     parent must hand the memory controller down, and only a cgroup
//     without processes can: the controller moves itself into a leaf
//     "lardon3d-controller" beside the subtree, as a systemd-delegated
//     service does;
//   - on v2 under systemd (/run/systemd/system), whose cgroup the
//     controller may divide: its own only when the unit it runs in has
//     Delegate=yes (asked over D-Bus: the system manager, or the user's
//     manager for a cgroup under user@UID.service) and the controller can
//     have that cgroup to itself. Elsewhere (a shell's child in a unit, a
//     login session's scope, a user manager's service) it asks systemd for
//     a transient scope NAME.scope with Delegate=yes holding the controller
//     (the system manager as root, the user's own manager otherwise: its
//     private socket, else the session bus), and builds the subtree there.
//     A scope asked for by a controller that a service started is PartOf=
//     and After= that service (where one manager has both), so stopping the
//     service stops the controller; one started from a login session is
//     not bound to it (it outlives the session where processes do).
//     A scope a crashed controller left (still holding its batches) is
//     joined, in its leaf, so its groups are found and killed. Tree.Setup
//     says which of these happened and why. One scope for the controller
//     rather than a scope per batch: a batch is then still cloned into its
//     group before its first instruction (CLONE_INTO_CGROUP), and starting
//     one costs a mkdir, not a D-Bus round trip and a job;
//   - one group per batch under the subtree, with its limits: v1
//     memory.limit_in_bytes (and memory.memsw.limit_in_bytes, so the limit
//     cannot be dodged by swapping) and memory.soft_limit_in_bytes at the
//     contract; v2 memory.max, memory.swap.max 0 and memory.oom.group 1 (an
//     OOM kill takes the batch whole); pids.max (Limits.PidsMax: v1 in the
//     pids hierarchy, v2 where the parent hands pids down, as it does cpu).
//     memory.high is left alone: at the
//     contract it would throttle, in reclaim, a batch that is within its
//     tolerance, slowing the machine's work instead of protecting it;
//   - placement before the first instruction: on v2 the child is cloned
//     into the group (Group.FD for SysProcAttr.UseCgroupFD); on v1 the
//     forking thread enters the group (Group.EnterThread), forks, and
//     leaves, so the child is born inside it;
//   - the readings: usage, the kernel's peak (memory.max_usage_in_bytes,
//     memory.peak), the working set (usage minus inactive file pages, as the
//     kubelet counts it), OOM kills (memory.oom_control, memory.events), CPU
//     time (v2 cpu.stat);
//   - freezing (v1 freezer.state, v2 cgroup.freeze), bounded in time;
//     killing every member (v2 cgroup.kill, else pids.max 0 so that
//     nothing forks any more, freeze, SIGKILL each, thaw); removal; the groups a crashed controller left (Tree.Leftovers,
//     Load);
//   - reuse (v1): an ended batch's group that is as good as a new one
//     (empty, never frozen nor sealed by a kill, no OOM kill, at most RecycleResidue charged)
//     is kept by Recycle and renamed by the next New, its peak reset and
//     only the limits that differ written; v2 groups cannot be renamed
//     and are removed.
//
// What it never does: decide a limit (the caller gives it), read or write
// anything outside the cgroup file systems and /proc (but for the D-Bus
// questions to systemd at Open), write under a systemd cgroup that is not
// delegated to it, or signal a process that is not listed in one of its
// groups. It imports no other package of this project.
//
// Why not github.com/containerd/cgroups/v3: its Freeze loops without a
// bound on a process that cannot freeze, its v2 kill fallback waits for
// (reaps) processes it did not start, and it pulls in D-Bus, eBPF and a
// logger for the dozen files used here. The scope is asked for with
// github.com/coreos/go-systemd/v22/dbus (over godbus), not with
// opencontainers/cgroups' systemd manager: that manager owns the unit's
// resources (it would write limits on the scope, which has none) and, for
// a user, finds the session bus by running busctl and systemctl, where
// the user manager's private socket needs no D-Bus daemon.
//
// Concurrency: a Tree is immutable after Open (but for what it looks up
// once: the way back EnterThread opens, the limit files the kernel offers;
// and the groups kept for reuse, under their own mutex, which is never
// held across another lock) and safe for concurrent use.
// A Group's methods may be called from several goroutines; they only read
// and write kernel files, and the caller serializes freeze and thaw.
package cgroup
