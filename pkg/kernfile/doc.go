// Package kernfile reads the kernel's small pseudo-files (/proc, /sys,
// cgroup files) in one open, a read until end of file, and a close.
//
// os.ReadFile registers every file it opens with the Go runtime's network
// poller. Files of procfs and kernfs can be polled, so the registration
// succeeds and costs four more system calls per read (epoll_ctl to add
// and to delete, fcntl to get and set the flags) and the poller's
// bookkeeping: 1.5 to 2.3 times the time of a plain read
// (BenchmarkRead). The controller reads some twenty such files per batch.
//
// It owns that one way of reading. It never writes, never follows a
// file's growth past end of file, and holds no state (no locks).
package kernfile
