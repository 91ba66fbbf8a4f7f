// Command benchkit is the Go side of bench/run.sh: it creates and removes
// the bench's memory cgroup, runs a command inside it while sampling the
// summed resident memory of its processes every 50 ms, generates the
// workloads' manifests and job lists, measures the controller's reaction to
// a dropped manifest (fsnotify plus a 2 ms poll) and its idle cost, parses
// `go test -bench` output, and renders the final table.
//
// It must never signal a process it did not start: measure kills only what
// is left in the bench's own cgroup after the measured command returns, and
// idle only reads /proc. Every subcommand appends its figures to a results
// file (JSON lines) that `benchkit report` turns into the table.
package main
