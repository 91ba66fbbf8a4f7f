// Package agent is the Kubernetes task source of a node agent: it presents
// the Tasks of an API server to the same reconciler, queue, governor and
// runner as the spool mode, through reconcile.Spool (the task-source seam).
//
// It owns which Task this node claims and when. A pass (on every watch
// event of a Task or a Lease, and every Config.Resync) looks at the Tasks
// in creation order (FIFO across the cluster) and claims one when
//
//   - nobody holds it (kube.Claimable), or its holder's Lease expired, or
//     it is held by this very node under a claim this process did not make
//     (a previous incarnation, whose batches died with it): kube.TakeOver.
//     The cache only finds candidates: another node's Lease is read again
//     from the API server before it is taken over, since the cache may not
//     have heard of it yet (its watch lags, or this process was stopped);
//   - every task it names in dependsOn, in its namespace, is Done: the
//     agent resolves dependencies across the cluster, so the core is
//     handed the task with dependsOn cleared;
//   - this node's governor, asked without reserving (Governor.Decide, a
//     dry run), would admit at least its smallest batch now;
//   - its Node (read every nodeCheckEvery) carries every label the task's
//     spec.pod.nodeSelector names, as the kubelet requires of its Pods;
//   - no task it claimed earlier is still waiting for the local queue's
//     admission: the dry run does not reserve, so claims are made one at a
//     time, each once the previous one is admitted (or settled).
//
// Only a task it claimed (the conditional update won) is presented to the
// reconciler, as a spool.Event whose Path is the opaque "namespace/name"
// and whose Task is the API object as the spool would have parsed it
// (v1alpha1.ParseManifest: the same defaults and validation), named
// "namespace.name" (namespaces hold no dot, so the name is unique). A lost
// race (409) presents nothing, so nothing runs.
//
// WriteStatus is the fenced commit (kube.Claimer.Commit) under the claim
// the task was presented with. When it finds the task held under another
// claim (ErrFenced), or a watch event shows so, the agent drops the task:
// it emits a Deleted event, on which the reconciler cancels the task and
// kills its batches, and it never writes that task's status under that
// claim again; the node takes part again only through a fresh claim.
//
// A task nobody holds that waits for its dependencies (or whose dependency
// failed, or is missing) gets the spool mode's DependenciesReady=False
// condition and reason, written unclaimed by whichever node sees it first.
// A task no node can fit (this governor rejects it for its capacity, and
// no live node publishes enough memory in its Lease's annotations) gets
// the condition Admitted=False, reason NoNodeFits, with every live node's
// grantable memory, written unclaimed (conditional; a conflict is ignored).
//
// A Task that ended (Done, Failed, Rejected) and whose spec changed since
// (a new spec.retryToken, an edit) is claimed again (kube.Claimer.Reopen)
// once the process that held it is gone; a holder still running takes the
// change itself.
//
// Each agent heartbeats its Lease (kube.Heartbeat, every RenewPeriod) with
// its capacity in the annotations AnnotationMemory and AnnotationCPUs.
// Liveness (fence.go) is client-go leader election's:
//
//   - another node's Lease is expired once this agent saw it unchanged for
//     its duration, on its own clock (kube.Liveness), counted only since its
//     own renewals last succeeded after a failure;
//   - with no successful renewal for RenewDeadline (< LeaseDuration), the
//     agent stops its own batches (self-fencing): every task it holds is
//     presented to the reconciler paused, which stops the batch and keeps
//     the reservation. Once a renewal succeeds, each task is read from the
//     API server: still under this claim, it is presented as it is there;
//     under another, it is dropped as a fenced task is. While fenced, the
//     agent claims nothing;
//   - no task is taken over from another node while more than TakeoverHalt
//     of the Leases counted (alive, or of a node holding a task not ended)
//     are expired at once.
//
// Drain (drain.go): while this node's Node is cordoned or carries a
// NoSchedule or NoExecute taint not in Config.TolerateTaints (read every
// nodeCheckEvery), or once Leave was called (the agent stops), the agent
// claims nothing and tells the queue to drain (Drainer, the reconciler:
// no batch starts, each task is left Pending at its batch boundary); each
// task held that no worker holds and whose last status written is Pending
// or ended is let go (kube.Claimer.Release: claim released, progress
// kept) and dropped from the reconciler. ReleaseAll lets go of what is
// left once the reconciler stopped.
//
// Events (events.go): each claim, takeover, reopening and fence, and what
// each status write tells (an admission with its contract, a batch killed
// for memory and how it is retried, the end: completed, failed, rejected,
// or a pause), is an Event on the Task, through client-go's recorder
// (kubectl describe task shows them), sent by Run.
//
// Locking. Source.mu guards the held and pending tables and the renewal
// and fence state; it is never held across a call to the API server or the
// governor (the recorder only queues). Run is the only goroutine that
// claims and releases; the events reach the reconciler from a goroutine
// of their own (deliver), so that a pass blocked on the API server holds
// none back; WriteStatus runs on the reconciler's goroutine; the
// heartbeat and the fence's watch run on their own.
//
// It never runs a batch, never writes a Task's spec, and never decides
// admission itself: the governor does, locally, and the reconciler's queue
// makes the actual reservation.
package agent
