package spool

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// leaseResult says what a read lease attempt told about a file.
type leaseResult int

const (
	// leaseGranted: nobody holds the file open for writing; until the
	// lease is released, an open for writing (or a truncate) by anyone
	// else waits and marks the lease broken.
	leaseGranted leaseResult = iota + 1
	// leaseBusy: some process holds the file open for writing.
	leaseBusy
	// leaseUnsupported: the kernel gives no answer here (file system
	// without leases, a file the controller may not lease, leases
	// disabled); callers fall back to a quiet period.
	leaseUnsupported
)

// takeLease tries a read lease (fcntl F_SETLEASE F_RDLCK) on f, which must
// be open read-only. Leases need the file's owner or CAP_LEASE.
func takeLease(f *os.File) leaseResult {
	_, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK)
	switch {
	case err == nil:
		return leaseGranted
	case errors.Is(err, unix.EAGAIN):
		return leaseBusy
	default: // EACCES, EINVAL, ENOSYS, ...
		return leaseUnsupported
	}
}

// leaseBroken reports whether someone started opening the leased file for
// writing since the lease was taken (the kernel then reports the type the
// lease is being broken to: F_UNLCK). That opener waits until release.
func leaseBroken(f *os.File) bool {
	t, err := unix.FcntlInt(f.Fd(), unix.F_GETLEASE, 0)
	return err != nil || t != unix.F_RDLCK
}

// releaseLease lets any waiting opener proceed.
func releaseLease(f *os.File) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
}

// openWriters reports whether some process holds f open for writing:
// leaseBusy, leaseGranted (nobody; the lease is released at once) or
// leaseUnsupported (cannot tell).
func openWriters(f *os.File) leaseResult {
	r := takeLease(f)
	if r == leaseGranted {
		releaseLease(f)
	}
	return r
}
