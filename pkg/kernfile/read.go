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
	var fd int
	var err error
	for {
		if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
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
