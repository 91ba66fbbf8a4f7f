// Package kube is the Kubernetes side of a node agent: how a node claims a
// Task on the API server and says it is alive.
//
// It owns the claim (Claimer: one conditional update of a Task's status,
// keyed by the resourceVersion read, so that of several nodes claiming the
// same task exactly one succeeds and the others get a conflict) and the
// node's heartbeat (a coordination.k8s.io Lease per node). The test control
// plane lives in kubetest.
//
// It must never run a batch, ask a governor, or write a Task's spec; it does
// not decide which task to claim (the caller does, with its governor). It
// holds no locks of its own: the API server's optimistic concurrency is the
// only arbiter between nodes.
package kube
