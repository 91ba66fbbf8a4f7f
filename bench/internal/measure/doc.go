// Package measure owns the benchmark's view of the machine: a memory (and,
// where the kernel offers it, CPU accounting) cgroup that plays the 8 GiB
// envelope, and a sampler that sums the resident memory of the processes in
// that cgroup from /proc every 50 ms.
//
// It must never kill, signal or move a process it was not handed: Kill acts
// only on the pids listed in the bench's own cgroup. It never touches a
// cgroup it did not create, except to read its own path from /proc/self/cgroup.
//
// The filesystem roots (/proc and /sys/fs/cgroup) are injectable so that the
// parsers run on fixture trees in tests. There is no lock: a Sampler is used
// by one goroutine.
package measure
