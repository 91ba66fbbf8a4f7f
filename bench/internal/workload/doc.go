// Package workload owns the benchmark's packing workloads: workload A (20
// identical photogrammetry-like tasks) and workload B (a deterministic mix),
// how they are written as Task manifests for the controller and as hand-split
// job lines for the peers, and their lower bound.
//
// It is pure: it never runs a command, reads /proc, or writes a file; callers
// write what it renders. It holds no lock.
package workload
