package spool

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// keeperPoll is how soon the keeper first looks at the displaced inodes
// it keeps, and how often while a writer is writing one (keepBroken).
const keeperPoll = 5 * time.Millisecond

// keeperSweep is how often the keeper looks otherwise. A writer that
// breaks a lease does not wait for it: the kernel signals the break
// (SIGIO, to the process that holds the lease) and the signal wakes the
// keeper. The sweep ends the grace periods (each may last up to this much
// longer), compares the unleased inodes, and catches a break signalled
// before the keeper listened. (Each look is a system call per inode kept:
// looking every 5 ms, a stream of short tasks spent 5 % of the
// controller's CPU in the keeper.) A variable for the tests.
var keeperSweep = 25 * time.Millisecond

// writerWait bounds how long the keeper waits for a writer of a displaced
// inode to close it before merging what it wrote so far.
const writerWait = 10 * time.Second

// keepMode says how a displaced inode is watched.
type keepMode int

const (
	// keepLeased: a read lease is held; it breaks if anyone starts writing.
	keepLeased keepMode = iota + 1
	// keepUnleased: no lease was possible; the content is compared at the
	// end of the grace period.
	keepUnleased
	// keepBroken: someone is writing it; wait for them to close it.
	keepBroken
)

// kept is one displaced inode under watch. Guarded by Spool.kmu.
type kept struct {
	path string
	f    *os.File
	mode keepMode
	// base is the inode's content when it was displaced; liveUser the user
	// part of the manifest that replaced it.
	base, liveUser []byte
	until          time.Time
	since          time.Time
}

// keep watches a displaced inode (unlinked, open as f) for the displaced
// grace period; what reaches it is merged back into the manifest at path.
func (s *Spool) keep(path string, f *os.File, leased bool, base, liveUser []byte) {
	mode := keepUnleased
	if leased {
		mode = keepLeased
	}
	s.keepAs(path, f, mode, base, liveUser)
}

// keepAs puts a displaced inode under watch in the given mode.
func (s *Spool) keepAs(path string, f *os.File, mode keepMode, base, liveUser []byte) {
	now := time.Now()
	s.kmu.Lock()
	defer s.kmu.Unlock()
	if s.closing && !s.keeperOn {
		// Closing: nobody will watch it (only a write-back racing Close).
		if mode == keepLeased {
			releaseLease(f)
		}
		_ = f.Close()
		return
	}
	s.kept = append(s.kept, &kept{path: path, f: f, mode: mode, base: base, liveUser: liveUser, until: now.Add(s.opts.DisplacedGrace), since: now})
	if !s.keeperOn {
		s.keeperOn = true
		s.keepers.Add(1)
		go s.keeperLoop()
	}
}

// keeperLoop runs while inodes are kept. It looks at them when a lease
// break is signalled, and every keeperSweep (keeperPoll at first, and
// while one is being written).
func (s *Spool) keeperLoop() {
	defer s.keepers.Done()
	breaks := make(chan os.Signal, 1)
	signal.Notify(breaks, unix.SIGIO)
	defer signal.Stop(breaks)
	wait := time.NewTimer(keeperPoll)
	defer wait.Stop()
	for {
		select {
		case <-breaks:
		case <-wait.C:
		}
		s.stats.KeeperLooks.Add(1)
		now := time.Now()
		var due []*kept
		writing := false
		s.kmu.Lock()
		rest := s.kept[:0]
		for _, k := range s.kept {
			switch {
			case k.mode == keepLeased && leaseBroken(k.f):
				// A writer found the inode before the swap and is opening it
				// now: let it write, then merge.
				releaseLease(k.f)
				k.mode, k.since = keepBroken, now
				rest, writing = append(rest, k), true
			case k.mode == keepBroken:
				if openWriters(k.f) == leaseBusy && now.Sub(k.since) < writerWait {
					rest, writing = append(rest, k), true
				} else {
					due = append(due, k)
				}
			case now.After(k.until):
				if k.mode == keepLeased {
					releaseLease(k.f) // untouched throughout
					_ = k.f.Close()
				} else {
					due = append(due, k)
				}
			default:
				rest = append(rest, k)
			}
		}
		clear(s.kept[len(rest):])
		s.kept = rest
		stop := len(rest) == 0
		if stop {
			s.keeperOn = false
		}
		s.kmu.Unlock()
		for _, k := range due {
			s.settleKept(k)
		}
		if stop {
			return
		}
		next := keeperSweep
		if writing {
			next = keeperPoll
		}
		wait.Reset(next)
	}
}

// errMergeConflict: the displaced inode and the manifest both changed.
var errMergeConflict = errors.New("both the manifest and its displaced version changed")

// settleKept merges what was written into a displaced inode.
func (s *Spool) settleKept(k *kept) {
	defer k.f.Close()
	_, d, _, err := readVersion(k.f, s.opts.MaxFileSize)
	if err != nil || bytes.Equal(d, k.base) {
		return
	}
	appended, isAppend := bytes.CutPrefix(d, k.base)
	err = s.editAs(k.path, func(cur []byte) ([]byte, error) {
		var cand []byte
		curUser := s.userPart(k.path, cur)
		switch {
		case bytes.Equal(curUser, k.liveUser):
			cand = d // only status changed since: the user's version wins
		case isAppend:
			cand = append(bytes.Clone(cur), appended...)
		case bytes.HasPrefix(curUser, k.liveUser):
			// The manifest only gained lines at its end since (a writer
			// that rewrote the old inode in place, then appended to the
			// new one): the user's version, then those lines.
			cand = append(bytes.Clone(d), curUser[len(k.liveUser):]...)
		default:
			return nil, errMergeConflict
		}
		if e := s.lastEditOf(k.path); e != nil {
			if out, err := e(cand); err == nil {
				return out, nil
			}
		}
		return cand, nil // not rewritable: the user's bytes as they are
	}, false)
	if err == nil {
		s.stats.Merges.Add(1)
		s.log.Info().Str("file", filepath.Base(k.path)).Msg("a write reached the version a write-back displaced; merged back")
		return
	}
	s.stats.Conflicts.Add(1)
	kept, cerr := s.saveConflict(k.path, d)
	s.log.Error().Err(err).AnErr("saveErr", cerr).Str("file", filepath.Base(k.path)).Str("kept", kept).
		Msg("a write reached the version a write-back displaced and could not be merged; it is kept beside the manifest")
}

// conflictName is a fresh name beside the manifest leaf for a version of
// the user's that is kept: NAME.yaml.lardon3d-conflict-HEX, neither a
// manifest nor a temp file, so nothing reads or removes it.
func conflictName(leaf string) string {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return leaf + ".lardon3d-conflict-" + hex.EncodeToString(rnd[:])
}

// saveConflict writes data beside the manifest at path under a name that
// is not a manifest (NAME.yaml.lardon3d-conflict-HEX).
func (s *Spool) saveConflict(path string, data []byte) (string, error) {
	t, err := s.root.resolve(filepath.Base(path))
	if err != nil {
		return "", err
	}
	defer t.close()
	name := conflictName(t.leaf)
	fd, err := unix.Openat(t.parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	// The manifest's owner's before a byte is written (see writeTemp).
	_ = f.Chown(int(t.st.Uid), int(t.st.Gid))
	_, werr := f.Write(data)
	if err := f.Close(); werr == nil {
		werr = err
	}
	return name, werr
}
