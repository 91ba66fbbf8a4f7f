package kernfile

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// OpenFile is os.OpenFile for a file Go's poller cannot wait on: a
// regular file, a directory, a file of /proc, /sys or a cgroup file
// system. os.OpenFile tries to register every file with the poller: for a
// regular file or a directory that costs four system calls for nothing
// (fcntl to set non-blocking, an epoll_ctl the kernel refuses, fcntl to
// set blocking again), for a pseudo-file four more at the close. OpenFile
// opens with O_CLOEXEC and hands the descriptor to os.NewFile, which
// only reads its flags: the file is read and written with plain system
// calls, and has no deadlines. perm's permission bits only are used (no
// setuid, setgid or sticky bit). Its errors are *fs.PathError, as
// os.OpenFile's.
func OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	var fd int
	var err error
	for {
		if fd, err = unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm.Perm())); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}
