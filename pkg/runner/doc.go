// Package runner runs one batch of a task as real processes: the command,
// once, as its own process group and, when Spec.Cgroup is set, in a cgroup
// of its own, under the batch's contract.
//
// What it owns:
//   - the items file (LARDON3D_ITEMS_FILE, one item per line, written
//     through a buffer: a count's range, Spec.ItemCount, as its decimals,
//     no string made per item) in Spec.RunDir:
//     with Spec.Spares a pool file rewritten in place by the next batch once
//     this one succeeds (one of at most 64 KiB: a longer list is unlinked),
//     without TASK.batch-INDEX.items, unlinked once it succeeds; the items
//     of a batch that fails are kept as TASK.batch-INDEX.items until
//     RemoveItemsFiles (the caller's, when the task is gone or Done);
//   - the batch's lines in the task's log file (opened in append mode, never
//     through a link): a header "=== batch 3 items 120..155 threads 4
//     memory 2.2GiB attempt 1 at RFC3339 ===" (the item range is
//     inclusive), the command's stdout and stderr, and an end line with the
//     exit, the reason and the peak memory. The command writes both to one
//     pipe; one goroutine per batch (the output copier) is the log's only
//     writer: it caps the log at Spec.LogMaxBytes (a write that would pass
//     it first renames the log to LOG.1 and starts a new one) and drops,
//     counting them, the writes the disk refuses, so the command never
//     waits on anything but the disk and never fails for its log;
//   - the progress the command reports: the copier finds the
//     "LARDON3D_PROGRESS n" lines on the way, and every SampleInterval the
//     last count is told to Spec.OnProgress;
//   - the environment: for a batch run as another uid than the
//     controller's, built from nothing (baseEnv): the user's HOME, USER,
//     LOGNAME and SHELL (its passwd entry's; /bin/sh when it names none)
//     and PATH DefaultPath, never a variable of the controller's; for a
//     batch run as the controller's own user, the controller's (with
//     Spec.User, HOME, USER and LOGNAME the user's, each removed when the
//     user has no value for it); then LARDON3D_TASK, _BATCH_INDEX,
//     _BATCH_START, _BATCH_SIZE, _ITEMS_TOTAL, _ITEMS_FILE, _THREADS,
//     _MEMORY_LIMIT, _SCRATCH_DIR (when the contract leases scratch: the
//     lease's directory, which the controller creates before the batch and
//     removes at the lease's release; the runner only exports it), OMP_NUM_THREADS,
//     OPENBLAS_NUM_THREADS, MKL_NUM_THREADS and GOMAXPROCS (the contract's
//     threads), then Spec.Mark, then Spec.Env in order, then LARDON3D_BATCH_ID (BatchIDEnv:
//     a value of the batch's own, which Spec.Env cannot replace). $(VAR) in env values and in the
//     command expands as in Kubernetes: "$$" escapes, an unknown reference
//     stays as written, an env value sees only the variables before it;
//   - the batch's user (Spec.User, the owner of the task's manifest, as
//     atd, cron and slurmd run a job as its owner; LookupUser fills it
//     from os/user): a controller running as root starts the command with
//     the user's uid, gid and supplementary groups (SysProcAttr.Credential,
//     set in the child before the exec; never root's groups), whatever the
//     uid, 0 included; one that is not root runs a batch only as itself
//     (ErrRunAsUser otherwise). The items file is then the user's (fchown
//     on its descriptor before it is written; a pool file of another user
//     is unlinked, never handed on) in a run directory that stays the
//     controller's, made traversable (0711), the log saying when a
//     directory above it bars the user. For a uid other than 0 the run
//     and log directories, and every directory above them, must be root's
//     or the controller's, writable by their owner alone (sticky ones
//     above aside): root writes there by path, and a user who could
//     change one could plant a link where root writes (ErrRunAsUser
//     otherwise). The log file is inherited as an open descriptor, so its
//     mode does not matter. The
//     scratch directory and the working directory are the caller's to make
//     usable by the user. Everything the runner does to the batch
//     (signals, cgroup, freezer, procfs reads) it does as root;
//   - the batch's place in the kernel's OOM order (oom.go): every process
//     of the batch gets oom_score_adj BatchOOMScoreAdj (1000, ahead of
//     any program at 0 whatever its size), the leader as soon as Start
//     has it, each process found at a sample that was not yet raised (one
//     forked in between holds the controller's value until then: Go runs
//     no code in the child between fork and exec); the controller lowers
//     its own to ControllerOOMScoreAdj (−500) where it holds
//     CAP_SYS_RESOURCE (LowerOwnOOMScoreAdj);
//   - the process group: Setpgid, a parent-death SIGKILL on the leader, the
//     CPU affinity of Spec.CPUs (set on the forking thread so the child is
//     bound from its first instruction; when the kernel refuses, the batch
//     runs unbound and the log says so);
//   - the batch's cgroup (Spec.Cgroup set): created before the start with
//     the limit MemoryLimit×(1+tolerance) and pids.max Spec.PidsMax, the
//     command born inside it
//     (package cgroup places it before its first instruction), handed
//     back at the end (cgroup.Group.Recycle: kept for a later batch when
//     it is as good as a new one, else removed). The kernel enforces the limit; an OOM kill in the cgroup
//     ends the whole batch with ReasonMemoryExceeded, the reported peak is
//     the kernel's (shared pages count once), and the working set (usage
//     minus inactive file pages) is sampled every SampleInterval. A process
//     seen in the cgroup at a sample (the leader from the start) that is
//     later alive outside it moved itself out (a batch that may write the
//     cgroup files: root, or the controller's own user): it is killed with
//     what it started and the batch ends with ReasonLeftCgroup; once the
//     batch ended, its processes still carrying its BatchIDEnv (one that
//     left before any sample) are killed (KillByEnv);
//   - without a cgroup, the memory watch: every SampleInterval the resident
//     memory (RSS) of every process of the group is summed through procfs;
//     above MemoryLimit×(1+tolerance) the group is killed with SIGKILL and
//     the batch ends with ReasonMemoryExceeded. RSS counts shared pages once
//     per process, so the sum errs on the high side, and a burst between
//     two samples is not seen. A process outside the group (setsid,
//     setpgid) is the batch's when, seen for the first time, its parent is
//     or its environment carries the batch's LARDON3D_BATCH_ID; it is then
//     counted, stopped, continued and killed with the group (by pid and
//     start time). One that clears its environment and loses its parent
//     between two samples is missed. "Seen for the first time" is per
//     process, not per pid: a pid the kernel gave out again since the last
//     sample (ns_last_pid, round the wrap) is judged again. A controller without cgroups also
//     calls AdoptOrphans: it becomes the child subreaper of its batches, so
//     a process whose parent ended is re-parented to it, not to init, and
//     it reaps the ones it did not start (never a batch leader, never a
//     child in its own process group). The reported peak is the highest sampled sum
//     (the leader's ru_maxrss is not used: a forked child starts with its
//     parent's, so it would report the controller's own size);
//   - the GPU memory watch (Spec.GPUMemory, GPUID and GPUMemoryLimit set):
//     at every sample, when the GPUMemoryReader has a newer measurement,
//     the GPU memory of the batch's processes at that sample (its cgroup's
//     members, else its group's and those found outside it) is summed;
//     the highest sum is Result.PeakGPUMemoryBytes, and a sum above
//     GPUMemoryLimit×(1+tolerance) kills the whole batch with
//     ReasonGPUMemoryExceeded. The reader's measurement is as old as its
//     own period (the probe's nvidia-smi, 2 s): an allocation made and
//     freed in between is not seen. A reading that fails (the GPU gone,
//     its memory unreadable) holds the batch to nothing, never to a
//     guess, and the log says so once per change. An NVIDIA GPUID is the
//     only device the batch sees (CUDA_VISIBLE_DEVICES in PCI order);
//   - the timeout (paused time excluded), timed by the batch
//     (batchclock.go): a leader found exited when the timeout is handled
//     ended by itself and its exit decides, unless the kernel's clock
//     (/proc/PID/sched) dates its exit past the deadline; the end reported
//     is the leader's exit as the kernel dates it, when the supervisor
//     noticed it more than a second late (a stopped controller); and Cancel: SIGTERM and SIGCONT to
//     every process of the cgroup and the group (a frozen cgroup is thawed
//     first), SIGKILL after KillGrace;
//   - pause: the cgroup frozen (every member, whatever its session), or,
//     without one, SIGSTOP to the group and to the processes found outside it;
//   - the end: the leader is waited for without being reaped (waitid
//     WNOWAIT, once its pidfd is readable in Go's poller: no thread is
//     blocked per batch), so its pid and group id cannot be reused while
//     the rest of the batch is killed; every process left in the cgroup
//     (or, without one, the group) after the leader exited gets SIGKILL
//     (Result.Stragglers counts them); only when no live process remains
//     is the leader reaped and Wait released. Zombies count as gone: they
//     hold no memory and their parent owns them.
//
// Descriptors (fds.go): a batch gets its standard input (none), and its
// output pipe as stdout and stderr, nothing else. Before every fork,
// CloseOnExecInherited marks every descriptor above 2 close-on-exec
// (close_range, else fcntl over /proc/self/fd): Go opens its own files
// close-on-exec, but os/exec closes nothing in the child, so a
// descriptor the controller inherited without the flag (a root shell's
// `exec 7</root/secret`) would reach every batch. The controller calls it
// once at start too, for its other children.
//
// The executor seam (executor.go): Executor is what the reconciler's batch
// adapter starts a batch through, Execution what it holds of it; Processes
// is Start, and package podrunner's Pods runs each batch as a Pod of the
// same Spec (ContainerEnv builds a container's environment the way
// buildEnv builds a process's, over an empty base; Spec.Mark, the
// controller's marker variable, is a process's only).
//
// Errors: Start wraps in a *PrepareError (Transient) what may pass — the
// run directory, the items file, the log or the cgroup could not be made
// (a full or read-only disk) —, and returns the others (ErrCommandNotFound,
// ErrInvalidSpec, ErrRunAsUser) as they are: they hold until the spec or
// the machine changes.
//
// Crash safety: the parent-death signal kills the leader when the
// controller dies (Linux delivers it when the thread that forked the child
// exits: do not call Start from a goroutine locked to its thread that then
// ends). It holds for a batch run as another user: the kernel clears the
// setting when the credentials change, and Go's forkExec sets it after
// setgroups, setgid and setuid; the exec of a set-user-ID binary clears it
// again, as for any batch. Grandchildren do not get it; Batch.Group gives
// the group id with the leader's start time, the boot id and the cgroup,
// to be recorded;
// KillLeftover kills what a crashed controller left (everything in the
// cgroup, then the group, never a process whose pid was reused), and
// KillLeftoverCgroups everything left under the subtree. KillByEnv, for a
// controller without cgroups, kills only the caller's user's processes (a
// root controller's thus does not reach a batch run as another user: only
// its cgroup or its recorded group does).
//
// What it must never do: decide admission or read the machine's budgets
// (the governor does), retry or resize batches (the queue does), signal a
// process outside the batch's cgroup and group, or import other packages of
// this project than pkg/apis/v1alpha1 (reason names), pkg/governor (its byte
// format, so that numbers read the same everywhere) and pkg/cgroup.
//
// Concurrency: each Batch has one supervising goroutine that owns sampling,
// the timeout, cancellation and the end, plus one goroutine waiting for the
// leader's exit (parked in the poller, or blocked in waitid on a kernel
// without pidfds). Pause and Resume are serialized by Batch.opMu, which is taken
// before Batch.mu (the pause accounting, held only briefly); the supervisor
// takes only Batch.mu.
package runner
