package trust

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ErrUntrusted: a directory may be changed by someone else than the
// controller, or is not what it should be (a link, not a directory).
var ErrUntrusted = errors.New("not the controller's alone")

// ControllerOnly returns an error wrapping ErrUntrusted when dir (what
// names it, in the error), or a directory above it, may be changed by
// someone else than the controller: owned by another user than root and
// the controller, or writable by its group or others. A sticky directory
// above dir (/tmp) is allowed: there no one renames or removes what is
// not theirs.
func ControllerOnly(dir, what string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for d := abs; ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return fmt.Errorf("%s: %w", what, &os.PathError{Op: "stat", Path: d, Err: err})
		}
		if !Safe(&st, d == abs) {
			return Untrusted(what, dir, d, &st)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// OwnDir returns an error wrapping ErrUntrusted unless dir is a directory
// itself (not a link to one), owned by the controller's user, writable by
// it alone, and every directory above it passes ControllerOnly.
func OwnDir(dir, what string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("%s: %w", what, &os.PathError{Op: "lstat", Path: dir, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%w: %s %s is not a directory (a link, or a file): remove it, or choose another", ErrUntrusted, what, dir)
	}
	if int64(st.Uid) != int64(os.Geteuid()) || st.Mode&0o022 != 0 {
		return Untrusted(what, dir, dir, &st)
	}
	return ControllerOnly(dir, what)
}

// Safe is ControllerOnly's test of one directory of stat st: owned by
// root or the controller's user, and written by its owner alone or, above
// the leaf, sticky.
func Safe(st *unix.Stat_t, leaf bool) bool {
	ownerOK := st.Uid == 0 || int64(st.Uid) == int64(os.Geteuid())
	writeOK := st.Mode&0o022 == 0 || !leaf && st.Mode&unix.S_ISVTX != 0
	return ownerOK && writeOK
}

// Untrusted is the error of a directory d (dir, or one above it) that
// fails Safe: it wraps ErrUntrusted.
func Untrusted(what, dir, d string, st *unix.Stat_t) error {
	where := what + " " + dir
	if d != dir {
		where += ": " + d + " above it"
	}
	return fmt.Errorf("%w: %s (owner uid %d, mode %#o) may be changed by others than the controller (uid %d)",
		ErrUntrusted, where, st.Uid, st.Mode&0o7777, os.Geteuid())
}
