package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotRegular reports a manifest that is not a regular file (a FIFO, a
// socket, a device, a directory); it is never opened for reading.
var ErrNotRegular = errors.New("not a regular file")

// ErrForeignOwner reports a manifest, a symlink leading to it or a
// directory on the way owned by a user other than the controller's (root
// aside).
var ErrForeignOwner = errors.New("owned by another user")

// ErrChanged reports a file replaced between the moment it was judged and
// the moment it was opened; the caller starts again.
var ErrChanged = errors.New("file changed while it was opened")

// errDangling reports a symlink whose target does not exist.
var errDangling = errors.New("dangling symlink")

// maxLinks bounds the symlink chain from a manifest name to its file.
const maxLinks = 8

// root is the spool directory opened once. Every manifest is reached from
// its descriptor, component by component, never by handing a path to the
// kernel to resolve: a symlink is read (readlinkat), judged (owner, stays
// inside the spool) and its target opened with O_NOFOLLOW from a directory
// descriptor, so a link that changes after it was judged is never followed.
type root struct {
	// dir is the spool's absolute path as given; real is it with symlinks
	// resolved (for absolute link targets).
	dir, real string
	fd        int
	// owner is the user, besides root, whose files the controller reads
	// and writes: its own, or, for a controller running as root, the
	// spool directory's owner (it runs their tasks as them).
	owner int
	// euid is the controller's effective user.
	euid int
}

// openRoot opens dir (absolute) as a root.
func openRoot(dir string) (*root, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	euid := os.Geteuid()
	owner := euid
	if owner == 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			_ = unix.Close(fd)
			return nil, &fs.PathError{Op: "stat", Path: dir, Err: err}
		}
		owner = int(st.Uid)
	}
	return &root{dir: dir, real: real, fd: fd, owner: owner, euid: euid}, nil
}

func (r *root) close() { _ = unix.Close(r.fd) }

// allowed reports whether uid may own what the controller reads or writes.
func (r *root) allowed(uid uint32) bool { return int(uid) == r.owner || uid == 0 }

// allowedManifest reports whether uid may own a manifest: one the
// controller can write a status into. A controller that is not root
// cannot give the new version of a root-owned file its owner back, so it
// would run the task and never commit its progress (every restart running
// it again): it refuses the file up front.
func (r *root) allowedManifest(uid uint32) bool {
	return int(uid) == r.owner || (uid == 0 && r.euid == 0)
}

// foreignManifest is the error of a manifest allowedManifest refuses.
func (r *root) foreignManifest(rel string, uid uint32) error {
	if uid == 0 {
		return fmt.Errorf("%s %w: owned by root, and this controller (uid %d) cannot write a status into a root-owned file; chown it to uid %d", rel, ErrForeignOwner, r.euid, r.owner)
	}
	return r.foreign(rel, uid)
}

func (r *root) foreign(what string, uid uint32) error {
	if r.euid == 0 {
		return fmt.Errorf("%s %w: uid %d, neither the spool's owner (uid %d) nor root", what, ErrForeignOwner, uid, r.owner)
	}
	return fmt.Errorf("%s %w: uid %d, neither this controller's user (uid %d) nor root", what, ErrForeignOwner, uid, r.owner)
}

// target is a manifest's file, judged: a regular file inside the spool,
// owned by an allowed user, reached through links and directories owned by
// allowed users. parent is a descriptor of the directory holding leaf; the
// caller closes it (close).
type target struct {
	parent int
	leaf   string
	// rel is the file's path relative to the spool.
	rel string
	st  unix.Stat_t
}

func (t *target) close() { _ = unix.Close(t.parent) }

// resolve judges the manifest called name (a base name in the spool). It
// fails with an error wrapping fs.ErrNotExist when name does not exist
// (dangling links included), ErrOutsideSpool, ErrNotRegular or
// ErrForeignOwner.
func (r *root) resolve(name string) (*target, error) {
	rel := name
	for hop := 0; ; hop++ {
		if hop > maxLinks {
			return nil, fmt.Errorf("%s: more than %d symlinks", name, maxLinks)
		}
		dirRel, leaf := path.Split(rel)
		pfd, err := r.openDir(dirRel)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s: %w to %s (%v)", name, errDangling, rel, err)
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			_ = unix.Close(pfd)
			if hop > 0 && errors.Is(err, unix.ENOENT) {
				return nil, fmt.Errorf("%s: %w to %s", name, errDangling, rel)
			}
			return nil, &fs.PathError{Op: "stat", Path: rel, Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if !r.allowedManifest(st.Uid) {
				_ = unix.Close(pfd)
				return nil, r.foreignManifest(rel, st.Uid)
			}
			return &target{parent: pfd, leaf: leaf, rel: rel, st: st}, nil
		case unix.S_IFLNK:
			if !r.allowed(st.Uid) {
				_ = unix.Close(pfd)
				return nil, r.foreign("symlink "+rel, st.Uid)
			}
			dest, err := readlinkat(pfd, leaf)
			_ = unix.Close(pfd)
			if err != nil {
				return nil, &fs.PathError{Op: "readlink", Path: rel, Err: err}
			}
			next, ok := r.inside(dirRel, dest)
			if !ok {
				return nil, fmt.Errorf("symlink %s -> %s: %w", rel, dest, ErrOutsideSpool)
			}
			rel = next
		default:
			_ = unix.Close(pfd)
			return nil, fmt.Errorf("%s: %w (%s)", rel, ErrNotRegular, fileKind(st.Mode))
		}
	}
}

// statPlain returns the status of name when it is a regular file of an
// allowed owner right in the spool directory (no link, no directory to
// cross): what resolve would judge a target, with one fstatat and no
// descriptor. ok is false for anything else, which resolve then judges.
func (r *root) statPlain(name string) (st unix.Stat_t, ok bool) {
	if strings.Contains(name, "/") {
		return st, false
	}
	if err := Fstatat(r.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, false
	}
	return st, st.Mode&unix.S_IFMT == unix.S_IFREG && r.allowedManifest(st.Uid)
}

// inside maps a link target read in directory dirRel to a path relative to
// the spool; ok is false when it leaves the spool.
func (r *root) inside(dirRel, dest string) (string, bool) {
	var next string
	if path.IsAbs(dest) {
		d := path.Clean(dest)
		found := false
		for _, base := range []string{r.real, r.dir} {
			if rest, cut := strings.CutPrefix(d, base+"/"); cut {
				next, found = rest, true
				break
			}
		}
		if !found {
			return "", false
		}
	} else {
		next = path.Join(dirRel, dest)
	}
	next = path.Clean(next)
	if next == "." || next == ".." || strings.HasPrefix(next, "../") || path.IsAbs(next) {
		return "", false
	}
	return next, true
}

// openDir opens the directory dirRel ("" or "a/b/") under the root, one
// component at a time with O_NOFOLLOW, each owned by an allowed user.
func (r *root) openDir(dirRel string) (int, error) {
	fd, err := dupCloexec(r.fd)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(strings.Trim(dirRel, "/"), "/") {
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			_ = unix.Close(fd)
			return -1, ErrOutsideSpool
		}
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		_ = unix.Close(fd)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				return -1, fmt.Errorf("%s is not a directory (symlinked directories are not followed): %w", c, ErrOutsideSpool)
			}
			if errors.Is(err, unix.ENOENT) {
				return -1, fmt.Errorf("directory %s: %w", c, fs.ErrNotExist)
			}
			return -1, &fs.PathError{Op: "open", Path: c, Err: err}
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			_ = unix.Close(next)
			return -1, err
		}
		if !r.allowed(st.Uid) {
			_ = unix.Close(next)
			return -1, r.foreign("directory "+c, st.Uid)
		}
		fd = next
	}
	return fd, nil
}

// open opens the judged file for reading: O_NOFOLLOW from its directory's
// descriptor and O_NONBLOCK (a FIFO put there since it was judged cannot
// block), then checks it is still the regular file judged.
func (t *target) open() (*os.File, error) {
	fd, err := unix.Openat(t.parent, t.leaf, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%s: %w", t.rel, ErrChanged)
		}
		return nil, &fs.PathError{Op: "open", Path: t.rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != t.st.Ino || st.Dev != t.st.Dev {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("%s: %w", t.rel, ErrChanged)
	}
	// Reads of a regular file never block; clear the flag all the same.
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return os.NewFile(uintptr(fd), t.rel), nil
}

// openFile resolves and opens a manifest for reading, retrying when it is
// replaced in between.
func (r *root) openFile(name string) (*target, *os.File, error) {
	for i := 0; ; i++ {
		t, err := r.resolve(name)
		if err != nil {
			return nil, nil, err
		}
		f, err := t.open()
		if err == nil {
			return t, f, nil
		}
		t.close()
		if !errors.Is(err, ErrChanged) || i >= 3 {
			return nil, nil, err
		}
	}
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size > 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}

// fileKind names a non-regular file type for messages.
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// ReadManifest reads the manifest called name in the spool directory dir
// the way the controller does: through the checked path (a regular file
// inside the spool, owned by the controller's user or root, reached through
// links and directories owned by them; never opening a FIFO, socket or
// device), at most max bytes (0: DefaultMaxFileSize). The error wraps
// fs.ErrNotExist, ErrOutsideSpool, ErrNotRegular, ErrForeignOwner or
// ErrTooLarge. The read-only verbs use it.
func ReadManifest(dir, name string, max int64) ([]byte, error) {
	rd, err := OpenReader(dir, max)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return rd.Read(name)
}

// Reader reads manifests of one spool directory, opened once, as
// ReadManifest does: a listing reads thousands. It is safe for
// concurrent use.
type Reader struct {
	r   *root
	max int64
}

// OpenReader opens the spool directory dir for reading manifests of at
// most max bytes (0: DefaultMaxFileSize).
func OpenReader(dir string, max int64) (*Reader, error) {
	if max <= 0 {
		max = DefaultMaxFileSize
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	r, err := openRoot(abs)
	if err != nil {
		return nil, err
	}
	return &Reader{r: r, max: max}, nil
}

// Read is ReadManifest of the manifest called name.
func (rd *Reader) Read(name string) ([]byte, error) {
	if data, ok := rd.readPlain(name); ok {
		return data, nil
	}
	t, f, err := rd.r.openFile(name)
	if err != nil {
		return nil, err
	}
	defer t.close()
	defer f.Close()
	data, _, err := readContent(f, rd.max)
	return data, err
}

// Close releases the directory.
func (rd *Reader) Close() { rd.r.close() }

// readPlain reads name when it is a regular file of an allowed owner right
// in the spool directory, of at most rd.max bytes, and no longer than it
// was stat'ed (it did not grow while read): what Read reads, in five
// system calls instead of eleven (no descriptor of its directory, no flag
// to clear: a read of a regular file never blocks). A listing reads
// thousands. ok is false for anything else, which Read then judges the
// whole way (links, errors, growth).
func (rd *Reader) readPlain(name string) (data []byte, ok bool) {
	st, plain := rd.r.statPlain(name)
	if !plain || st.Size > rd.max {
		return nil, false
	}
	fd, err := unix.Openat(rd.r.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil || now.Mode&unix.S_IFMT != unix.S_IFREG || now.Ino != st.Ino || now.Dev != st.Dev || now.Size > rd.max {
		return nil, false
	}
	// One byte more than its size: a read that fills it saw the file grow.
	buf := make([]byte, now.Size+1)
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, false
		}
		if m == 0 {
			break
		}
		n += m
	}
	if n == len(buf) {
		return nil, false
	}
	return buf[:n], true
}

// dupCloexec duplicates fd close-on-exec, so that no batch the controller
// starts inherits it (unix.Dup would not set the flag).
func dupCloexec(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}
