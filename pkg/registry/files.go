package registry

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

const (
	lockName    = "registry.lock"
	claimPrefix = "controller-"
	claimSuffix = ".json"
	// tempPrefix names claims being written: never read as claims, and
	// removed under the registry lock, where none can be in progress.
	tempPrefix = ".claim-"
	// noFollow opens nothing through a symlink planted under one of our
	// names, and does not hang on a FIFO planted there.
	noFollow     = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
	maxClaimSize = 1 << 20
)

// lockWait bounds the wait for the registry lock, which another Acquire
// holds only for a few file operations (a variable: tests shorten it).
var lockWait = 10 * time.Second

// lockRegistry takes the exclusive flock on dir's registry.lock, waiting
// at most lockWait, and returns its release. private is for the system's
// directory, which only root writes: its lock is mode 0600 and root's, so
// that no user can open it, hence hold it.
func lockRegistry(dir string, private bool) (func(), error) {
	path := filepath.Join(dir, lockName)
	f, err := openLock(path, private)
	if err != nil {
		return nil, fmt.Errorf("registry lock: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	// Tried again after 1 ms, doubling up to 20 ms.
	for retry := (wait.Backoff{Duration: time.Millisecond, Factor: 2, Cap: 20 * time.Millisecond, Steps: math.MaxInt32}); ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("registry lock %s: %w", path, err)
		}
		time.Sleep(retry.Step())
	}
}

// openLock opens the registry lock file, creating it readable by everyone
// when missing (private: by root alone). An existing one is opened without
// O_CREAT: with fs.protected_regular, O_CREAT on another user's file in a
// sticky directory fails even where the mode allows the open. A private
// lock that is not a file of root's own (one a user left in the system's
// directory of an older layout, mode 1777) is removed and made again.
func openLock(path string, private bool) (*os.File, error) {
	mode := os.FileMode(0o644)
	if private {
		mode = 0o600
	}
	for range 3 {
		f, err := os.OpenFile(path, os.O_RDWR|noFollow, 0)
		if err == nil && private {
			if fi, serr := f.Stat(); serr != nil || !ownedByRoot(fi) || fi.Mode().Perm() != mode || !fi.Mode().IsRegular() {
				_ = f.Close()
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, err
				}
				continue
			}
		}
		if errors.Is(err, fs.ErrPermission) {
			// flock works on a read-only descriptor too.
			return os.OpenFile(path, os.O_RDONLY|noFollow, 0)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|noFollow, mode)
		if err == nil {
			// Readable past the umask: every user's controller opens it
			// (flock needs no write access), and none may link it (a
			// file they cannot write, with fs.protected_hardlinks).
			return f, f.Chmod(mode)
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		// Another controller created it meanwhile: open that one.
	}
	return nil, fmt.Errorf("%s keeps appearing and vanishing", path)
}

// scan returns the live claims in dirs, by PID. In pruneIn, whose
// registry lock the caller holds, it removes stale claims and abandoned
// temporary files (where it may: in a sticky directory, not another
// user's); only there, since without the lock a new claim could take a
// stale one's name between the check and the removal.
func scan(dirs []string, pruneIn string) ([]Claim, error) {
	var live []Claim
	var errs []error
	for _, dir := range dirs {
		if !readable(dir) {
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("registry directory %s: %w", dir, err))
			continue
		}
		prune := dir == pruneIn
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			switch {
			case isClaimName(e.Name()):
				c, alive, err := inspect(path, prune)
				if err != nil {
					errs = append(errs, err)
				} else if alive {
					live = append(live, c)
				}
			case prune && strings.HasPrefix(e.Name(), tempPrefix):
				_ = os.Remove(path)
			}
		}
	}
	slices.SortFunc(live, func(a, b Claim) int { return cmp.Compare(a.PID, b.PID) })
	return live, errors.Join(errs...)
}

// inspect reads the claim at path and says whether its controller lives:
// it does while it holds the file's exclusive flock, so a shared one is
// refused. A claim whose lock can be had is stale (its controller died
// without Release) and is removed when prune is set. A locked claim that
// is not genuine (its lock's holder is not the controller it names) is
// ignored: neither alive nor removed. A file whose name was
// given to a new version meanwhile (Held.Update renames the new one over
// it, then lets the old one go) is read again under its name.
func inspect(path string, prune bool) (Claim, bool, error) {
	for range 8 {
		c, alive, replaced, err := inspectOnce(path, prune)
		if !replaced {
			return c, alive, err
		}
	}
	return Claim{}, false, fmt.Errorf("claim %s: replaced again and again while read", path)
}

// inspectOnce is one try of inspect; replaced says the file read no
// longer has the name.
func inspectOnce(path string, prune bool) (c Claim, alive, replaced bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		// Gone since listed (released), a symlink, a socket, unreadable:
		// none is a claim a controller wrote (regular files, mode 0644),
		// and none may keep a controller from starting.
		return Claim{}, false, false, nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return Claim{}, false, false, nil
	}
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case err == nil:
		if cur, err := os.Lstat(path); err == nil && !os.SameFile(cur, fi) {
			return Claim{}, false, true, nil
		}
		if prune {
			_ = os.Remove(path)
		}
		return Claim{}, false, false, nil
	case !errors.Is(err, unix.EWOULDBLOCK):
		return Claim{}, false, false, fmt.Errorf("claim %s: %w", path, err)
	}
	c = Claim{}
	data, err := io.ReadAll(io.LimitReader(f, maxClaimSize))
	if err != nil || json.Unmarshal(data, &c) != nil || c.PID <= 0 {
		// Alive but unreadable: its name and owner still say who it is.
		c = Claim{PID: pidOfName(filepath.Base(path))}
	}
	// Who, the kernel says, not the file: its owner is the user, and the
	// holder of its lock must be the process it names, a controller of
	// that user (anyone can write a claim, and lock it with flock(1)).
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !genuine(int(st.Uid), c.PID, lockHolder(st, c.PID)) {
		return Claim{}, false, false, nil
	}
	if int(st.Uid) != c.UID {
		c.UID, c.User = int(st.Uid), userName(int(st.Uid))
	}
	return c, true, false, nil
}

// publish writes want to a new claim file in dir and returns it open,
// holding its exclusive flock, with the file's path. The file is written
// under a temporary name (writeLocked) and linked to its own: link never
// replaces, so a claim never takes the file of another.
func publish(dir string, want Claim) (*os.File, string, error) {
	tmp, err := writeLocked(dir, want)
	if err != nil {
		return nil, "", err
	}
	defer os.Remove(tmp.Name())
	for n := 0; ; n++ {
		// The first free name for its PID: controller-PID.json, else
		// controller-PID.N.json (a claim with this PID from this process,
		// or another user's stale one that we may not remove).
		path := filepath.Join(dir, claimName(want.PID, n))
		err := os.Link(tmp.Name(), path)
		if err == nil {
			return tmp, path, nil
		}
		if !errors.Is(err, fs.ErrExist) || n == 100 {
			_ = tmp.Close()
			return nil, "", fmt.Errorf("write claim: %w", err)
		}
	}
}

// writeLocked writes c to a new temporary file in dir, readable by every
// user's CLI, its exclusive flock taken before a byte is in it, and
// returns it open: whatever name it is given then (publish links it,
// Held.Update renames it), no reader sees it half written or unlocked.
// O_EXCL (os.CreateTemp) never follows a symlink; close-on-exec: a batch
// must not keep the claim alive after its controller died.
func writeLocked(dir string, c Claim) (*os.File, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("write claim: %w", err)
	}
	err = tmp.Chmod(0o644)
	if err == nil {
		err = unix.Flock(int(tmp.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err == nil {
		_, err = tmp.Write(append(data, '\n'))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		_ = tmp.Close()
		return nil, fmt.Errorf("write claim: %w", err)
	}
	return tmp, nil
}

func claimName(pid, n int) string {
	name := claimPrefix + strconv.Itoa(pid)
	if n > 0 {
		name += "." + strconv.Itoa(n)
	}
	return name + claimSuffix
}

func isClaimName(name string) bool {
	return strings.HasPrefix(name, claimPrefix) && strings.HasSuffix(name, claimSuffix)
}

// pidOfName is the PID in a claim file's name, 0 if none.
func pidOfName(name string) int {
	s := strings.TrimSuffix(strings.TrimPrefix(name, claimPrefix), claimSuffix)
	s, _, _ = strings.Cut(s, ".")
	pid, _ := strconv.Atoi(s)
	return pid
}
