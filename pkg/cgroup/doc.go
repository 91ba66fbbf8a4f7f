// Package cgroup gives each batch a control group of its own, so that the
// kernel, not a sampler, holds the batch to its memory contract and knows
// every process the batch started, however it forks or detaches.
//
// What it owns:
//   - discovery: the cgroup hierarchies mounted (from /proc/PID/mountinfo)
//     and the controller's own cgroups (from /proc/PID/cgroup). cgroup v1 is
//     used when a v1 hierarchy carries the memory controller (memory, and
//     freezer where it is mounted), else cgroup v2 when the
//     unified hierarchy offers memory;
//   - the subtree: one directory per hierarchy, Options.Name under the
//     parent (Options.Parent, or the controller's own cgroup). On v2 the
//     parent must hand the memory controller down: when the parent is the
//     controller's own cgroup and the kernel refuses (a cgroup holding
//     processes cannot enable controllers for its children), the controller
//     moves itself into a leaf "lardon3d-controller" beside the subtree, as
//     a systemd-delegated service does;
//   - one group per batch under the subtree, with its limits: v1
//     memory.limit_in_bytes (and memory.memsw.limit_in_bytes, so the limit
//     cannot be dodged by swapping) and memory.soft_limit_in_bytes at the
//     contract; v2 memory.max, memory.swap.max 0 and memory.oom.group 1 (an
//     OOM kill takes the batch whole). memory.high is left alone: at the
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
//     killing every member (v2 cgroup.kill, else freeze, SIGKILL each,
//     thaw); removal; the groups a crashed controller left (Tree.Leftovers,
//     Load);
//   - reuse (v1): an ended batch's group that is as good as a new one
//     (empty, never frozen, no OOM kill, at most RecycleResidue charged)
//     is kept by Recycle and renamed by the next New, its peak reset and
//     only the limits that differ written; v2 groups cannot be renamed
//     and are removed.
//
// What it never does: decide a limit (the caller gives it), read or write
// anything outside the cgroup file systems and /proc, or signal a process
// that is not listed in one of its groups. It imports no other package of
// this project.
//
// Why not github.com/containerd/cgroups/v3: its Freeze loops without a
// bound on a process that cannot freeze, its v2 kill fallback waits for
// (reaps) processes it did not start, and it pulls in D-Bus, eBPF and a
// logger for the dozen files used here.
//
// Concurrency: a Tree is immutable after Open (but for what it looks up
// once: the way back EnterThread opens, the limit files the kernel offers;
// and the groups kept for reuse, under their own mutex, which is never
// held across another lock) and safe for concurrent use.
// A Group's methods may be called from several goroutines; they only read
// and write kernel files, and the caller serializes freeze and thaw.
package cgroup
