// Package kernfile reads the kernel's small pseudo-files (/proc, /sys,
// cgroup files) in one open, a read until end of file, and a close; and
// opens the files Go's poller cannot help with (OpenFile).
//
// os.ReadFile and os.OpenFile register every file they open with the Go
// runtime's network poller. Files of procfs and kernfs can be polled, so
// the registration succeeds and costs four more system calls per file
// (epoll_ctl to add and to delete, fcntl to get and set the flags) and
// the poller's bookkeeping: 1.5 to 2.3 times the time of a plain read
// (BenchmarkRead). A regular file or a directory is refused by epoll
// after two fcntl, and two more set it back: an open and a close take
// 1.8 times as long (BenchmarkOpenFile). The controller reads some twenty
// such files per batch, and opens a few more (its log, its items file,
// the cgroup files it writes).
//
// It owns those ways of reading and opening. Read never writes, never
// follows a file's growth past end of file; neither holds state (no
// locks).
package kernfile
