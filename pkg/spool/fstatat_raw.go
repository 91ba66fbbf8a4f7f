//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x)

package spool

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Fstatat is unix.Fstatat made as a raw system call, which the Go
// scheduler does not see: it never hands the caller's P to another thread
// while the call runs. Listing a spool stats every manifest: get makes ten
// thousand of these from every P at once, and under load the runtime's
// monitor took each P back from the calls in flight and woke a thread for
// it (a tenth of a listing's time in a flood); the controller's relist of
// an idle spool of ten thousand manifests spent more in that monitor and
// the thread switches than in the stats. The call takes microseconds; a
// name whose inode is not cached holds the P for a disk read.
func Fstatat(dirfd int, name string, st *unix.Stat_t, flags int) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), uintptr(flags), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
