package reconcile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// logsDirName is the directory of a state directory that holds the tasks'
// logs.
const logsDirName = "logs"

// ErrNotATaskLog: what is in a task log's place is not one the controller
// wrote (a link, a FIFO, a device, a directory, another user's file), or
// the name is no task's. It is never read.
var ErrNotATaskLog = errors.New("not a task log")

// TaskLogPath is the log of the task named name of the spool whose state
// directory is stateDir: STATE/logs/NAME.log, where the controller has
// its batches write it. It is the one rule for where a task's log is:
// every reader (the web view, logs, describe) derives the path from the
// controller's state with it, never from the manifest. status.logFile,
// which whoever writes the manifest may edit, says the same for people to
// read, and is never opened: a root controller would read any file for a
// user who wrote "/etc/shadow" there. "" when name is no task name
// (v1alpha1.ValidName: nothing with a "/" reaches outside STATE/logs), or
// there is no state directory.
func TaskLogPath(stateDir, name string) string {
	if stateDir == "" || !v1alpha1.ValidName(name) {
		return ""
	}
	return filepath.Join(stateDir, logsDirName, name+".log")
}

// OpenTaskLog opens for reading the log of the task named name in
// stateDir (TaskLogPath; rotated: the part rotated away before it,
// runner.RotatedLogSuffix). The state directory is taken as given (the
// controller's own, or the one the reader trusts); below it, logs and the
// log are each opened from their directory's descriptor without
// following a link (O_NOFOLLOW) and without blocking on a FIFO, and the
// log must be a regular file owned by the caller's user or root: what
// else is found there wraps ErrNotATaskLog, no log yet fs.ErrNotExist.
func OpenTaskLog(stateDir, name string, rotated bool) (*os.File, error) {
	path := TaskLogPath(stateDir, name)
	if path == "" {
		return nil, fmt.Errorf("%w: %q is no task name", ErrNotATaskLog, name)
	}
	if rotated {
		path += runner.RotatedLogSuffix
	}
	dir, err := unix.Open(stateDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: stateDir, Err: err}
	}
	defer unix.Close(dir)
	logs, err := unix.Openat(dir, logsDirName, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, notALog(filepath.Dir(path), err)
	}
	defer unix.Close(logs)
	fd, err := unix.Openat(logs, filepath.Base(path), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, notALog(path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrNotATaskLog, path)
	case st.Uid != 0 && int64(st.Uid) != int64(os.Geteuid()):
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%w: %s belongs to uid %d", ErrNotATaskLog, path, st.Uid)
	}
	// Reads block again (a regular file never waits, but the flag would
	// reach the copies of the descriptor).
	if err := unix.SetNonblock(fd, false); err != nil {
		_ = unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// notALog is the error of an open under the state directory: a link
// (ELOOP, or ENOTDIR for logs) wraps ErrNotATaskLog, the rest (ENOENT
// among them) is the path error.
func notALog(path string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("%w: %s is a link or not a directory", ErrNotATaskLog, path)
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}
