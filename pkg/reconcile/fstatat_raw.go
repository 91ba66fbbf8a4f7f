//go:build linux && (amd64 || arm64 || riscv64 || loong64 || ppc64le || s390x)

package reconcile

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// fstatat is unix.Fstatat(dirfd, name, st, 0) made as a raw system call,
// which the Go scheduler does not see: it never hands the caller's P to
// another thread while the call runs. get makes ten thousand of these from
// every P at once, and under load the runtime's monitor took each P back
// from the calls in flight and woke a thread for it (a tenth of a
// listing's time in a flood). The call takes microseconds; a name whose
// inode is not cached holds the P for a disk read.
func fstatat(dirfd int, name string, st *unix.Stat_t) error {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return err
	}
	_, _, errno := unix.RawSyscall6(unix.SYS_NEWFSTATAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
