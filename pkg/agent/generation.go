package agent

import (
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// The reconciler counts a task's specs itself (its "generation", a new one
// per edit, retry or restart, none for a pause) and writes that count in
// observedGeneration, as the spool keeps it. On the API server,
// observedGeneration is the metadata.generation the status reflects, as
// kubectl, Argo CD and Flux read it. The agent translates at the seam:
// what the reconciler writes goes to the server with its count in
// status.specRevision and observedGeneration (the status's and each
// condition's) set to the metadata.generation of the spec it describes;
// what the server holds is presented to the reconciler the other way.

// generations maps one held task's spec revisions (the reconciler's
// count) to the metadata.generations they were presented at. Guarded by
// Source.mu with the held entry that owns it.
type generations struct {
	// ofHash is, by spec hash (as the reconciler hashes the spec it was
	// presented), the latest metadata.generation presented with it.
	ofHash map[string]int64
	// ofRevision is, by spec revision, the metadata.generation of its
	// spec.
	ofRevision map[int64]int64
}

func newGenerations() generations {
	return generations{ofHash: map[string]int64{}, ofRevision: map[int64]int64{}}
}

// presented records that the reconciler was handed ev, made of a task at
// metadata.generation gen.
func (g generations) presented(ev spool.Event, gen int64) {
	if ev.Task != nil && ev.Err == nil && gen > 0 {
		g.ofHash[v1alpha1.SpecHash(ev.Task.Spec)] = gen
	}
}

// seed records what a status read from the server says: its revision's
// generation, and its spec hash's.
func (g generations) seed(st *kubeapi.TaskStatus) {
	if st.SpecRevision > 0 && st.ObservedGeneration > 0 {
		g.ofRevision[st.SpecRevision] = st.ObservedGeneration
		if st.SpecHash != "" {
			g.ofHash[st.SpecHash] = st.ObservedGeneration
		}
	}
}

// toServer is the status st, as the reconciler wrote it, as the server
// keeps it: observedGeneration the metadata.generation of the spec st
// describes (0 when unknown), the reconciler's count in SpecRevision.
func (g generations) toServer(st *v1alpha1.TaskStatus) kubeapi.TaskStatus {
	out := kubeapi.TaskStatus{TaskStatus: *st.DeepCopy(), SpecRevision: st.ObservedGeneration}
	rev := st.ObservedGeneration
	if gen, ok := g.ofHash[st.SpecHash]; ok && rev > 0 {
		g.ofRevision[rev] = gen
	}
	out.ObservedGeneration = g.ofRevision[rev]
	for i := range out.Conditions {
		out.Conditions[i].ObservedGeneration = g.ofRevision[out.Conditions[i].ObservedGeneration]
	}
	return out
}

// toCore is the status st, as the server keeps it, as the reconciler
// wrote it: its count back in observedGeneration. A status written by an
// agent older than specRevision (a spec hash, no revision) already holds
// the count there; one no node wrote for a spec (no hash) has none.
func (g generations) toCore(st *kubeapi.TaskStatus) *v1alpha1.TaskStatus {
	out := st.TaskStatus.DeepCopy()
	switch {
	case st.SpecRevision > 0:
		out.ObservedGeneration = st.SpecRevision
	case st.SpecHash == "":
		out.ObservedGeneration = 0
	default:
		return out // the count already
	}
	revOf := make(map[int64]int64, len(g.ofRevision))
	for rev, gen := range g.ofRevision {
		revOf[gen] = max(revOf[gen], rev)
	}
	for i := range out.Conditions {
		out.Conditions[i].ObservedGeneration = revOf[out.Conditions[i].ObservedGeneration]
	}
	return out
}
