package spool

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

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
	fi, err := f.Stat()
	if err != nil {
		return FileIdentity{}, nil, nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileIdentity{}, nil, nil, fmt.Errorf("stat %s: no unix stat", f.Name())
	}
	if !fi.Mode().IsRegular() {
		return FileIdentity{}, nil, nil, fmt.Errorf("%s: not a regular file", f.Name())
	}
	if fi.Size() > max {
		return FileIdentity{}, nil, nil, fmt.Errorf("%s: %w: %d bytes, the limit is %d", f.Name(), ErrTooLarge, fi.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, 0, max+1), max+1))
	if err != nil {
		return FileIdentity{}, nil, nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if int64(len(data)) > max {
		return FileIdentity{}, nil, nil, fmt.Errorf("%s: %w: more than %d bytes", f.Name(), ErrTooLarge, max)
	}
	id := FileIdentity{Inode: st.Ino, Size: int64(len(data)), ModTime: fi.ModTime(), Hash: sha256.Sum256(data)}
	return id, data, st, nil
}

// EditFile applies edit to the file at path and replaces the file
// atomically, losing no concurrent edit of the file by someone else:
//
//  1. open and read the file (identity: inode, size, mtime, SHA-256);
//  2. out := edit(content); nothing is written when out equals content or
//     edit fails (its error is returned as is);
//  3. write out to a dotfile in the same directory, fchmod/fchown it to the
//     file's mode and owner, fsync it;
//  4. check the file is still the version read (else drop the dotfile and
//     start again from 1);
//  5. swap the dotfile and the file with renameat2(RENAME_EXCHANGE);
//  6. check the displaced file (now under the dotfile's name) is still the
//     version read: if so remove it and fsync the directory, done; if not,
//     someone wrote in the window between 4 and 5: swap back, so their
//     version is the manifest again, and start again from 1.
//
// It gives up with ErrConflict after maxEditAttempts rounds. A symlink is
// resolved and its target edited. Where renameat2 is not supported it falls
// back to rename(2), checked before but not after. See the package doc for
// the window that remains. Edits of the same path must be serialised by
// the caller (Spool does it with a per-path lock).
func EditFile(path string, edit func([]byte) ([]byte, error)) error {
	return editFile(path, DefaultMaxFileSize, edit, nil)
}

// editStats counts what editFile saw, for the stress test.
type editStats struct {
	// Rounds is the number of read/check/swap rounds.
	Rounds int
	// PreConflicts counts changes caught before the swap (step 4).
	PreConflicts int
	// PostConflicts counts changes caught after the swap (step 6) and undone.
	PostConflicts int
}

func editFile(path string, max int64, edit func([]byte) ([]byte, error), stats *editStats) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("edit %s: %w", path, err)
	}
	if stats == nil {
		stats = &editStats{}
	}
	for attempt := 0; attempt < maxEditAttempts; attempt++ {
		stats.Rounds++
		done, err := editOnce(real, max, edit, stats)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	return fmt.Errorf("edit %s: %w (%d attempts)", path, ErrConflict, maxEditAttempts)
}

// editOnce runs one round; done is false when the round must be retried.
func editOnce(path string, max int64, edit func([]byte) ([]byte, error), stats *editStats) (done bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("edit %s: %w", path, err)
	}
	defer f.Close()
	read, data, st, err := readVersion(f, max)
	if err != nil {
		return false, fmt.Errorf("edit %s: %w", path, err)
	}
	out, err := edit(data)
	if err != nil {
		return false, err
	}
	if bytes.Equal(out, data) {
		return true, nil
	}
	dir := filepath.Dir(path)
	tmp, written, err := writeTemp(dir, filepath.Base(path), out, st)
	if err != nil {
		return false, fmt.Errorf("edit %s: %w", path, err)
	}
	keepTmp := false
	defer func() {
		if !keepTmp {
			_ = os.Remove(tmp)
		}
	}()
	// Step 4: is the file still what we read?
	if !stillVersion(path, f, read, max) {
		stats.PreConflicts++
		return false, nil
	}
	// Step 5: swap.
	err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		if err := os.Rename(tmp, path); err != nil {
			return false, fmt.Errorf("edit %s: %w", path, err)
		}
		return true, syncDir(dir)
	}
	if err != nil {
		return false, fmt.Errorf("edit %s: swap: %w", path, err)
	}
	// Step 6: tmp now names the displaced file; was it still what we read?
	if stillVersion(tmp, f, read, max) {
		if err := os.Remove(tmp); err != nil {
			return false, fmt.Errorf("edit %s: remove displaced version: %w", path, err)
		}
		keepTmp = true // removed already
		return true, syncDir(dir)
	}
	stats.PostConflicts++
	// Someone wrote between the check and the swap: their version is under
	// tmp, ours under path. Swap back and retry from their version.
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE); err != nil {
		keepTmp = true
		return false, fmt.Errorf("edit %s: swap back (the newer version is kept as %s): %w", path, tmp, err)
	}
	var back unix.Stat_t
	if err := unix.Lstat(tmp, &back); err != nil || back.Ino != written {
		// What came back is not our version: a third writer replaced the
		// file meanwhile. Keep it rather than guess which one is newest.
		keepTmp = true
		return false, fmt.Errorf("edit %s: %w: concurrent replacements, a version is kept as %s", path, ErrConflict, tmp)
	}
	return false, syncDir(dir)
}

// stillVersion reports whether name still is the inode f reads and holds
// exactly the bytes of want.
func stillVersion(name string, f *os.File, want FileIdentity, max int64) bool {
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil || st.Ino != want.Inode {
		return false
	}
	now, _, _, err := readVersion(f, max)
	return err == nil && now.sameVersion(want)
}

// writeTemp writes data to a new dotfile in dir with the mode and owner of
// st, fsynced, and returns its path and inode.
func writeTemp(dir, base string, data []byte, st *syscall.Stat_t) (string, uint64, error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return "", 0, fmt.Errorf("temp name: %w", err)
	}
	name := filepath.Join(dir, "."+base+".lardon3d-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", 0, fmt.Errorf("create temp: %w", err)
	}
	fail := func(err error) (string, uint64, error) {
		_ = f.Close()
		_ = os.Remove(name)
		return "", 0, err
	}
	if _, err := f.Write(data); err != nil {
		return fail(fmt.Errorf("write temp: %w", err))
	}
	if err := f.Chown(int(st.Uid), int(st.Gid)); err != nil {
		return fail(fmt.Errorf("keep owner %d:%d: %w", st.Uid, st.Gid, err))
	}
	// After chown: chown clears setuid/setgid bits.
	if err := f.Chmod(os.FileMode(st.Mode&0o7777).Perm() | setBits(st.Mode)); err != nil {
		return fail(fmt.Errorf("keep mode %#o: %w", st.Mode&0o7777, err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("fsync temp: %w", err))
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("stat temp: %w", err))
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(name)
		return "", 0, fmt.Errorf("close temp: %w", err)
	}
	return name, fi.Sys().(*syscall.Stat_t).Ino, nil
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
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
