package spool

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrConflict reports a write-back that gave up because the file kept
// changing under it (maxEditAttempts in a row).
var ErrConflict = errors.New("manifest kept changing during write-back")

// ErrTooLarge reports a manifest larger than the size cap.
var ErrTooLarge = errors.New("manifest too large")

// DefaultMaxFileSize is the largest manifest the spool reads (1 MiB).
const DefaultMaxFileSize = 1 << 20

// maxEditAttempts bounds EditFile's read/check/swap loop.
const maxEditAttempts = 8

// FileIdentity identifies one version of a file: the bytes read and the
// inode they were read from.
type FileIdentity struct {
	// Inode is the file's inode number.
	Inode uint64
	// Size is the number of bytes read.
	Size int64
	// ModTime is the file's modification time when read.
	ModTime time.Time
	// Hash is the SHA-256 of the bytes read.
	Hash [sha256.Size]byte
}

// String prints the identity briefly for logs.
func (id FileIdentity) String() string {
	return fmt.Sprintf("ino=%d size=%d sha256=%s", id.Inode, id.Size, hex.EncodeToString(id.Hash[:6]))
}

// sameVersion reports whether two identities name the same bytes in the
// same inode with the same mtime.
func (id FileIdentity) sameVersion(o FileIdentity) bool {
	return id.Inode == o.Inode && id.Size == o.Size && id.ModTime.Equal(o.ModTime) && id.Hash == o.Hash
}

// readVersion reads f from offset 0 (at most max bytes) and returns its
// identity, content and stat.
func readVersion(f *os.File, max int64) (FileIdentity, []byte, *syscall.Stat_t, error) {
	data, fi, err := readContent(f, max)
	if err != nil {
		return FileIdentity{}, nil, nil, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	id := FileIdentity{Inode: st.Ino, Size: int64(len(data)), ModTime: fi.ModTime(), Hash: sha256.Sum256(data)}
	return id, data, st, nil
}

// readContent reads the regular file f from offset 0, at most max bytes,
// and returns its content and its stat (a *syscall.Stat_t inside).
func readContent(f *os.File, max int64) ([]byte, fs.FileInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if _, ok := fi.Sys().(*syscall.Stat_t); !ok {
		return nil, nil, fmt.Errorf("stat %s: no unix stat", f.Name())
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", f.Name())
	}
	if fi.Size() > max {
		return nil, nil, fmt.Errorf("%s: %w: %d bytes, the limit is %d", f.Name(), ErrTooLarge, fi.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, max+1), max+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if int64(len(data)) > max {
		return nil, nil, fmt.Errorf("%s: %w: more than %d bytes", f.Name(), ErrTooLarge, max)
	}
	return data, fi, nil
}

// ErrBusy reports a write-back that found the manifest held open for
// writing by another process for longer than Options.BusyWait.
var ErrBusy = errors.New("manifest is held open for writing by another process")

// editFunc computes a manifest's new content from its current one.
type editFunc func([]byte) ([]byte, error)

// editStats counts what the write-backs saw, for the stress tests.
type editStats struct {
	// Rounds is the number of read/check/swap rounds.
	Rounds atomic.Int64
	// Busy counts rounds that found a writer holding the file open.
	Busy atomic.Int64
	// PreConflicts counts changes caught before the swap.
	PreConflicts atomic.Int64
	// PostConflicts counts changes caught after the swap and undone.
	PostConflicts atomic.Int64
	// Merges counts writes that reached a displaced inode and were merged
	// back into the manifest; Conflicts those kept as a conflict copy.
	Merges, Conflicts atomic.Int64
	// KnownLayout counts status edits made through a known layout (no
	// parse of the file).
	KnownLayout atomic.Int64
	// KeeperLooks counts the keeper's looks at the displaced inodes.
	KeeperLooks atomic.Int64
}

// EditFile applies edit to the manifest at path, through the same checked
// write path as Spool.WriteStatus, with the file's directory as the spool
// (see Spool for the guarantees). It returns once the displaced version's
// grace period is over, so that nothing written to it is lost.
func EditFile(path string, edit func([]byte) ([]byte, error)) error {
	sp, err := Open(filepath.Dir(path), Options{AllowShared: true})
	if err != nil {
		return err
	}
	defer sp.Close()
	return sp.edit(path, edit)
}

// roundResult is how one write-back round ended.
type roundResult int

const (
	roundDone roundResult = iota + 1
	roundRetry
	roundBusy
)

// editFile runs write-back rounds until one succeeds. REQUIRES: the path
// lock of path.
func (s *Spool) editFile(path string, edit editFunc) error {
	var busySince time.Time
	for attempt := 0; attempt < maxEditAttempts; {
		s.stats.Rounds.Add(1)
		// After two rounds lost to a writer, take the lease before reading:
		// a writer that starts then waits for this round (a few ms) instead
		// of this round retrying behind a writer that never stops.
		res, err := s.editOnce(path, edit, attempt >= 2)
		if err != nil {
			return err
		}
		switch res {
		case roundDone:
			return nil
		case roundBusy:
			s.stats.Busy.Add(1)
			now := time.Now()
			if busySince.IsZero() {
				busySince = now
			}
			if now.Sub(busySince) >= s.opts.BusyWait {
				return fmt.Errorf("edit %s: %w", path, ErrBusy)
			}
			// Writers such as `>>` hold a file for microseconds.
			time.Sleep(time.Millisecond)
		default:
			attempt++
		}
	}
	return fmt.Errorf("edit %s: %w (%d attempts)", path, ErrConflict, maxEditAttempts)
}

// editOnce runs one round (see the package doc, "Write-back"); with
// leaseFirst the read lease is taken before the file is read.
func (s *Spool) editOnce(path string, edit editFunc, leaseFirst bool) (roundResult, error) {
	r, res, err := s.prepare(path, edit, leaseFirst)
	if r == nil {
		return res, err
	}
	defer r.close()
	if err := r.tmpFile.Sync(); err != nil {
		return 0, fmt.Errorf("edit %s: fsync temp: %w", path, err)
	}
	if err := r.closeTemp(); err != nil {
		return 0, fmt.Errorf("edit %s: %w", path, err)
	}
	res, err = s.swap(r)
	if err != nil || !r.swapped {
		return res, err
	}
	return res, syncDir(r.t.parent)
}

// round is one write-back round between its steps: prepared (the new
// version written to a temp file, not yet flushed), then swapped.
type round struct {
	path       string
	t          *target
	f          *os.File // the version read
	leaseFirst bool
	lease      leaseResult
	read       FileIdentity
	data, out  []byte
	tmp        string
	tmpFile    *os.File // open until flushed
	written    uint64
	removeTmp  bool
	kept       bool // f was handed to the keeper
	ours       *os.File
	// swapped: a rename or exchange happened in the directory (it needs
	// its fsync).
	swapped bool
	// statusSum identifies the status a group write-back writes (nil for
	// other edits).
	statusSum *[sha256.Size]byte
}

// close releases what the round holds and removes its temp file unless
// it became the manifest or was kept aside.
func (r *round) close() {
	if r.tmpFile != nil {
		_ = r.tmpFile.Close()
	}
	if r.ours != nil {
		_ = r.ours.Close()
	}
	if r.removeTmp {
		_ = unix.Unlinkat(r.t.parent, r.tmp, 0)
	}
	if !r.kept {
		if r.lease == leaseGranted {
			releaseLease(r.f)
		}
		_ = r.f.Close()
	}
	r.t.close()
}

// closeTemp closes the flushed temp file and notes its inode.
func (r *round) closeTemp() error {
	fi, err := r.tmpFile.Stat()
	if err != nil {
		return fmt.Errorf("stat temp: %w", err)
	}
	r.written = fi.Sys().(*syscall.Stat_t).Ino
	f := r.tmpFile
	r.tmpFile = nil
	if err := f.Close(); err != nil {
		return fmt.Errorf("close temp: %w", err)
	}
	return nil
}

// prepare runs steps 1 and 2 of a round: read the file, apply the edit,
// write the result to a temp file (not yet flushed). A nil round means the
// round ended here, with res and err (roundDone: nothing to change).
func (s *Spool) prepare(path string, edit editFunc, leaseFirst bool) (*round, roundResult, error) {
	t, f, err := s.root.openFile(filepath.Base(path))
	if err != nil {
		return nil, 0, fmt.Errorf("edit %s: %w", path, err)
	}
	r := &round{path: path, t: t, f: f, leaseFirst: leaseFirst}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	if leaseFirst {
		if r.lease = takeLease(f); r.lease == leaseBusy {
			return nil, roundBusy, nil
		}
	}
	read, data, st, err := readVersion(f, s.opts.MaxFileSize)
	if err != nil {
		return nil, 0, fmt.Errorf("edit %s: %w", path, err)
	}
	out, err := edit(data)
	if err != nil {
		return nil, 0, err
	}
	if bytes.Equal(out, data) {
		return nil, roundDone, nil
	}
	r.read, r.data, r.out = read, data, out
	r.tmp, r.tmpFile, err = writeTemp(t.parent, t.leaf, out, st)
	if err != nil {
		return nil, 0, fmt.Errorf("edit %s: %w", path, err)
	}
	r.removeTmp = true
	ok = true
	return r, 0, nil
}

// swap runs steps 3 to 6 of a prepared round whose temp file is flushed
// and closed: lease, check, exchange, check the displaced inode; it hands
// the displaced version to the keeper or swaps back. The directory fsync
// is the caller's (r.swapped says whether one is needed).
func (s *Spool) swap(r *round) (roundResult, error) {
	t, f, path, tmp := r.t, r.f, r.path, r.tmp
	// The lease: from here on, nobody can start writing into the version
	// read without the kernel telling us (and waiting for us).
	if !r.leaseFirst {
		if r.lease = takeLease(f); r.lease == leaseBusy {
			return roundBusy, nil
		}
	}
	leased := r.lease == leaseGranted
	// Our version, leased too, so that we know whether it may be swapped
	// back out if that is needed.
	oursLeased := false
	if fd, err := unix.Openat(t.parent, tmp, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		r.ours = os.NewFile(uintptr(fd), tmp)
		oursLeased = leased && takeLease(r.ours) == leaseGranted
	}
	// Is the file still what we read, and is nobody starting to write it?
	// A writer waiting for the lease goes first: this round gives way
	// (busy, bounded by BusyWait) rather than displace what it will write.
	if !stillVersion(t.parent, t.leaf, f, r.read, s.opts.MaxFileSize) {
		s.stats.PreConflicts.Add(1)
		return roundRetry, nil
	}
	if leased && leaseBroken(f) {
		s.stats.PreConflicts.Add(1)
		return roundBusy, nil
	}
	err := unix.Renameat2(t.parent, tmp, t.parent, t.leaf, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		if err := unix.Renameat(t.parent, tmp, t.parent, t.leaf); err != nil {
			return 0, fmt.Errorf("edit %s: %w", path, err)
		}
		r.swapped, r.removeTmp, r.kept = true, false, true
		s.keep(path, f, leased, r.data, s.userPart(path, r.out))
		return roundDone, nil
	}
	if err != nil {
		return 0, fmt.Errorf("edit %s: swap: %w", path, err)
	}
	r.swapped = true
	// tmp now names the displaced file: was it still the version read,
	// with nobody starting to write it?
	var disp unix.Stat_t
	ok := unix.Fstatat(t.parent, tmp, &disp, unix.AT_SYMLINK_NOFOLLOW) == nil && disp.Ino == r.read.Inode
	if ok && leased {
		ok = !leaseBroken(f)
	} else if ok {
		ok = stillVersion(t.parent, tmp, f, r.read, s.opts.MaxFileSize)
	}
	if ok {
		// Done. The displaced inode is unlinked at once (no dotfile is
		// left if the controller dies now) and kept open by the keeper for
		// the grace period, in case a write still reaches it.
		if err := unix.Unlinkat(t.parent, tmp, 0); err != nil {
			return 0, fmt.Errorf("edit %s: remove displaced version: %w", path, err)
		}
		r.removeTmp, r.kept = false, true
		s.keep(path, f, leased, r.data, s.userPart(path, r.out))
		return roundDone, nil
	}
	s.stats.PostConflicts.Add(1)
	// Someone wrote (or is starting to write) the version we displaced:
	// swap back, so that theirs is the manifest again (the same inode, so
	// their open descriptor writes into the manifest), and start again.
	if err := unix.Renameat2(t.parent, tmp, t.parent, t.leaf, unix.RENAME_EXCHANGE); err != nil {
		r.removeTmp = false
		return 0, fmt.Errorf("edit %s: swap back (the newer version is kept as %s): %w", path, keepAside(t.parent, t.leaf, tmp), err)
	}
	var back unix.Stat_t
	if err := unix.Fstatat(t.parent, tmp, &back, unix.AT_SYMLINK_NOFOLLOW); err != nil || back.Ino != r.written {
		// What came back is not our version: a third writer replaced the
		// file meanwhile. Keep it rather than guess which one is newest.
		r.removeTmp = false
		return 0, fmt.Errorf("edit %s: %w: concurrent replacements, a version is kept as %s", path, ErrConflict, keepAside(t.parent, t.leaf, tmp))
	}
	if r.ours != nil {
		// Did someone open our version for writing between the two swaps?
		// The keeper then merges what they write into the manifest.
		mode := keepMode(0)
		switch {
		case oursLeased && leaseBroken(r.ours):
			releaseLease(r.ours)
			mode = keepBroken
		case !oursLeased:
			mode = keepUnleased // compared at the end of the grace period
		}
		if mode != 0 {
			if dup, err := dupCloexec(int(r.ours.Fd())); err == nil {
				s.keepAs(path, os.NewFile(uintptr(dup), tmp), mode, r.out, s.userPart(path, r.data))
			}
		}
	}
	return roundRetry, nil
}

// stillVersion reports whether name (in directory dirfd) still is the
// inode f reads and holds exactly the bytes of want.
func stillVersion(dirfd int, name string, f *os.File, want FileIdentity, max int64) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Ino != want.Inode {
		return false
	}
	now, _, _, err := readVersion(f, max)
	return err == nil && now.sameVersion(want)
}

// tmpPattern matches this package's temporary files, exactly: a dotfile
// named after the manifest, ".lardon3d-", 12 hex digits, ".tmp".
var tmpPattern = regexp.MustCompile(`^\..+\.lardon3d-[0-9a-f]{12}\.tmp$`)

// writeTemp writes data to a new dotfile in the directory dirfd with the
// mode, owner and modification time of st, and returns its name and the
// file, still open and not yet flushed (the caller fsyncs it, alone or with
// others, before it becomes the manifest).
func writeTemp(dirfd int, base string, data []byte, st *syscall.Stat_t) (string, *os.File, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", nil, fmt.Errorf("temp name: %w", err)
	}
	name := "." + base + ".lardon3d-" + hex.EncodeToString(rnd[:]) + ".tmp"
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", nil, fmt.Errorf("create temp: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	fail := func(err error) (string, *os.File, error) {
		_ = f.Close()
		_ = unix.Unlinkat(dirfd, name, 0)
		return "", nil, err
	}
	// Owner and mode first, on the descriptor, before a byte is written:
	// the file is never, even for an instant, the controller's with the
	// user's content in the user's directory (where a controller running
	// as root could otherwise leave a root-owned copy of it, renamed away).
	if err := f.Chown(int(st.Uid), int(st.Gid)); err != nil {
		return fail(fmt.Errorf("keep owner %d:%d: %w", st.Uid, st.Gid, err))
	}
	// After chown: chown clears setuid/setgid bits.
	if err := f.Chmod(os.FileMode(st.Mode&0o7777).Perm() | setBits(st.Mode)); err != nil {
		return fail(fmt.Errorf("keep mode %#o: %w", st.Mode&0o7777, err))
	}
	if _, err := f.Write(data); err != nil {
		return fail(fmt.Errorf("write temp: %w", err))
	}
	// The modification time stays the user's: an editor holding the file
	// (vim, emacs compare it before saving) does not take a status write
	// for a change of the text it is editing, and refuse or mangle its save.
	// Set on the descriptor (utimensat with no path, as futimens does),
	// never by a name someone may have moved.
	ts := [2]unix.Timespec{{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec}, {Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}}
	if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, f.Fd(), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
		return fail(fmt.Errorf("keep modification time: %w", e))
	}
	return name, f, nil
}

// setBits maps the setuid, setgid and sticky bits of a raw mode.
func setBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&syscall.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// syncDir fsyncs a directory so a rename in it is durable.
func syncDir(dirfd int) error {
	if err := unix.Fsync(dirfd); err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	return nil
}

// keepAside renames a user's version that a write-back displaced and must
// keep (tmp, a dotfile of this package's temp pattern, which start-up
// removes) to a conflictName beside the manifest. It returns the name the
// version is kept under (tmp itself when the rename fails).
func keepAside(dir int, leaf, tmp string) string {
	name := conflictName(leaf)
	if err := unix.Renameat2(dir, tmp, dir, name, unix.RENAME_NOREPLACE); err != nil {
		return tmp
	}
	return name
}
