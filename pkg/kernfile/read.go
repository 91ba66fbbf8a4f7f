package kernfile

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// initialSize is the first buffer's size: most pseudo-files fit (a v1
// memory.stat is about 1 KiB); a larger one (an environment) grows it.
const initialSize = 4 << 10

// Read returns the content of the file at path, read with plain system
// calls (see the package comment). Its errors are *fs.PathError, so that
// errors.Is(err, fs.ErrNotExist) holds as for os.ReadFile.
func Read(path string) ([]byte, error) {
	fd, err := open(path, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, initialSize)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// open opens name with O_CLOEXEC added, again when interrupted; its
// errors are *fs.PathError.
func open(name string, flag int, perm uint32) (int, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, perm)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return -1, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return fd, nil
	}
}
