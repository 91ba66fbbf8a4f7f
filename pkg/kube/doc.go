// Package kube is the Kubernetes side of a node agent: how a node claims a
// Task on the API server and says it is alive.
//
// It owns the claim (Claimer.Claim: one conditional update of a Task's
// status, keyed by the resourceVersion read, so that of several nodes
// claiming the same task exactly one succeeds and the others get a
// conflict, LostRace), the takeover of a task whose holder's Lease expired
// (Claimer.TakeOver: the same update with the claim's Seq+1, progress kept),
// the claim of a task that ended and was retried or edited while its holder
// is gone (Claimer.Reopen, the same update; HolderGone says who is gone),
// the fence (Claimer.Commit: a status write under a claim; once the task is
// held under another claim it returns ErrFenced and writes nothing), the
// release (Claimer.Release: a draining holder lets a task go, progress
// kept, for any node to claim at once with Seq+1) and the
// node's heartbeat (Heartbeat: a coordination.k8s.io Lease per node, which
// says who is alive and is no fence; its annotations carry what the node
// publishes, e.g. its capacity) and who is gone (Liveness: a Lease seen
// unchanged for its duration on the observer's own clock, as client-go's
// leader election decides). The test control plane lives in kubetest.
// The node agent built on it (which task to claim, when, and how the
// shared reconciler sees it) is package agent.
//
// It must never run a batch, ask a governor, or write a Task's spec; it does
// not decide which task to claim (the caller, package agent, does, with its
// governor). Between nodes, the API server's optimistic concurrency is the
// only arbiter; Liveness's mutex guards only its own sightings.
package kube
