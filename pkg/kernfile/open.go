package kernfile

import "os"

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
	fd, err := open(name, flag, uint32(perm.Perm()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}
