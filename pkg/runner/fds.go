package runner

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseOnExecInherited marks every descriptor of this process above 2
// close-on-exec, so that a process it starts gets only what it is handed
// (exec.Cmd's Stdin, Stdout, Stderr and ExtraFiles, which the child sets
// up after the fork, whatever their flags here), never a descriptor the
// controller holds.
//
// Go opens every file close-on-exec, but os/exec closes nothing else in
// the child: a descriptor without the flag is one this process inherited
// from its parent (a root shell's `exec 7</root/secret`, fd 8 appending
// to a root-owned file) or one that code outside Go's os package made
// (cgo, a raw dup), and every batch would inherit it, a batch run as
// another user included. Start calls it before every batch's fork; the
// controller calls it once when it starts, for its other children
// (nvidia-smi, the node agent it execs). It is cheap (one close_range(2)
// with CLOSE_RANGE_CLOEXEC, Linux 5.11), and on an older kernel sets the
// flag with fcntl on each descriptor /proc/self/fd lists. It is safe to
// call from any goroutine: it only adds the flag.
func CloseOnExecInherited() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("close_range: %w", err)
	}
	return closeOnExecListed("/proc/self/fd")
}

// closeOnExecListed is CloseOnExecInherited's fallback: FD_CLOEXEC on
// each descriptor above 2 named in dir (/proc/self/fd). A descriptor
// closed meanwhile (EBADF) is skipped; one opened meanwhile by Go already
// has the flag.
func closeOnExecListed(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("list the descriptors to close on exec: %w", err)
	}
	names, err := d.Readdirnames(-1)
	_ = d.Close()
	if err != nil {
		return fmt.Errorf("list the descriptors to close on exec: %w", err)
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
		}
		if err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("close descriptor %d on exec: %w", fd, err)
		}
	}
	return nil
}
