package spool

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// StatusWrite is one write-back of a group (see WriteStatuses).
type StatusWrite struct {
	// Path is the manifest's path.
	Path string
	// Status is written into it (nil removes the status block).
	Status *v1alpha1.TaskStatus
}

// WriteStatuses writes several statuses as one group commit and returns
// one error per write, each what WriteStatus would have returned (nil,
// ErrDeferred, ErrNotRewritable, ...). Every file gets the same round as
// with WriteStatus, with the same checks and guarantees; only the flushes
// are shared: every new version is written to its temp file first, all
// are flushed together (one syncfs(2) of the spool's file system), then
// each is checked
// and exchanged with its manifest, then the directory is fsynced once. A
// kill at any moment leaves each manifest its old or its new version; a
// write is reported done only after the directory fsync.
//
// A file whose round does not end at the exchange (busy, changed under
// the round, gone) is then written alone, by WriteStatus's loop. Paths
// should be distinct; a repeated path is written in order.
func (s *Spool) WriteStatuses(ws []StatusWrite) []error {
	errs := make([]error, len(ws))
	if len(ws) == 1 {
		errs[0] = s.WriteStatus(ws[0].Path, ws[0].Status)
		return errs
	}
	type member struct {
		i     int
		abs   string
		lock  *pathLock
		edit  editFunc
		round *round
		done  bool
	}
	var ms []*member
	seen := make(map[string]bool, len(ws))
	var alone []int // repeated paths: written after the group, in order
	for i, w := range ws {
		abs, err := filepath.Abs(w.Path)
		if err != nil {
			errs[i] = fmt.Errorf("edit %s: %w", w.Path, err)
			continue
		}
		if filepath.Dir(abs) != s.dir || !IsManifestName(filepath.Base(abs)) {
			errs[i] = fmt.Errorf("write-back: edit %s: %w %s", w.Path, ErrOutsideSpool, s.dir)
			continue
		}
		if seen[abs] {
			alone = append(alone, i)
			continue
		}
		seen[abs] = true
		ms = append(ms, &member{i: i, abs: abs, edit: s.statusEdit(abs, w.Status)})
	}
	// Path locks in path order: two groups never wait for each other in a
	// cycle, and a single write-back holds one lock only.
	slices.SortFunc(ms, func(a, b *member) int {
		switch {
		case a.abs < b.abs:
			return -1
		case a.abs > b.abs:
			return 1
		}
		return 0
	})
	for _, m := range ms {
		m.lock = s.lock(m.abs)
		s.mu.Lock()
		s.lastEdit[m.abs] = m.edit
		s.mu.Unlock()
	}
	// Prepare: read, edit, write each temp file.
	var prepared []*member
	for _, m := range ms {
		if s.stillOurs(m.abs, ws[m.i].Status) {
			m.done = true // untouched since it got this very status
			continue
		}
		s.stats.Rounds.Add(1)
		r, res, err := s.prepare(m.abs, m.edit, false)
		switch {
		case r != nil:
			if sum, ok := statusSum(ws[m.i].Status); ok && ws[m.i].Status != nil {
				r.statusSum = &sum
			}
			m.round = r
			prepared = append(prepared, m)
		case err == nil && res == roundDone:
			m.done = true // nothing to change
		}
		// Anything else is written alone below (the error is its own).
	}
	// Flush: one syncfs for every temp file (the file system of the spool);
	// if it fails, or for a file on another file system (a symlink to a
	// mount point inside the spool), an fsync of each.
	var syncfsErr error
	var dev uint64
	if len(prepared) > 0 {
		var st unix.Stat_t
		syncfsErr = unix.Fstat(int(prepared[0].round.tmpFile.Fd()), &st)
		dev = st.Dev
		if syncfsErr == nil {
			syncfsErr = unix.Syncfs(int(prepared[0].round.tmpFile.Fd()))
		}
	}
	for _, m := range prepared {
		var err error
		var st unix.Stat_t
		if syncfsErr != nil || unix.Fstat(int(m.round.tmpFile.Fd()), &st) != nil || st.Dev != dev {
			err = m.round.tmpFile.Sync()
		}
		if err == nil {
			err = m.round.closeTemp()
		}
		if err != nil {
			m.round.close() // written alone below, where the error is its own
			m.round = nil
		}
	}
	// Exchange each, then one fsync per directory (the spool's, unless a
	// manifest is a symlink to a subdirectory).
	dirs := map[uint64]int{} // inode -> a duplicate of its descriptor
	dirOf := map[*member]uint64{}
	for _, m := range prepared {
		if m.round == nil {
			continue
		}
		res, err := s.swap(m.round)
		if m.round.swapped {
			var st unix.Stat_t
			if unix.Fstat(m.round.t.parent, &st) == nil {
				dirOf[m] = st.Ino
				if _, ok := dirs[st.Ino]; !ok {
					if d, derr := dupCloexec(m.round.t.parent); derr == nil {
						dirs[st.Ino] = d
					}
				}
			}
		}
		switch {
		case err == nil && res == roundDone:
			m.done = true
			s.noteWritten(m.round)
		case err != nil && !errors.Is(err, ErrConflict) && !isGone(err):
			errs[m.i] = fmt.Errorf("write-back: %w", err)
			m.done = true // a hard error, as WriteStatus would return it
		}
		m.round.close()
		m.round = nil
	}
	syncErrs := map[uint64]error{}
	for ino, d := range dirs {
		syncErrs[ino] = syncDir(d)
		_ = unix.Close(d)
	}
	for _, m := range ms {
		if ino, ok := dirOf[m]; ok && m.done && errs[m.i] == nil {
			if _, dup := dirs[ino]; !dup {
				errs[m.i] = errors.New("write-back: cannot fsync the directory")
			} else if err := syncErrs[ino]; err != nil {
				errs[m.i] = fmt.Errorf("write-back: %w", err)
			}
		}
		if m.done && errs[m.i] == nil {
			s.mu.Lock()
			delete(s.deferred, m.abs) // superseded
			s.mu.Unlock()
		}
	}
	for _, m := range ms {
		s.unlock(m.abs, m.lock)
	}
	// The rest: WriteStatus's own loop, one file at a time.
	for _, m := range ms {
		if !m.done {
			alone = append(alone, m.i)
		}
	}
	slices.Sort(alone)
	for _, i := range alone {
		errs[i] = s.WriteStatus(ws[i].Path, ws[i].Status)
	}
	return errs
}

// statusEdit is the edit of a status write-back of path: through the
// file's known layout when the bytes read are a version an earlier edit
// produced (no parse), else the full ReplaceStatus.
func (s *Spool) statusEdit(path string, status *v1alpha1.TaskStatus) editFunc {
	return func(b []byte) ([]byte, error) {
		var e edited
		var err error
		if l, ok := s.layoutOf(path, b); ok {
			s.stats.KnownLayout.Add(1)
			e, err = replaceStatusAt(b, l, status)
		} else {
			e, err = replaceStatus(b, status)
		}
		if err != nil {
			return nil, err
		}
		if status != nil {
			s.setLayout(path, e.layout())
		}
		return e.out, nil
	}
}

// layoutsKept is how many layouts are kept per file: the version last
// produced and the one before (the watcher may read that one still).
const layoutsKept = 2

// layoutOf returns the known layout of data, a version of path.
func (s *Spool) layoutOf(path string, data []byte) (statusLayout, bool) {
	sum := sha256.Sum256(data)
	s.lmu.Lock()
	defer s.lmu.Unlock()
	for _, l := range s.layouts[path] {
		if l.sum == sum {
			return l, true
		}
	}
	return statusLayout{}, false
}

// setLayout records the layout of a version of path an edit produced.
func (s *Spool) setLayout(path string, l statusLayout) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	ls := s.layouts[path]
	if len(ls) > 0 && ls[len(ls)-1].sum == l.sum {
		return
	}
	if len(ls) >= layoutsKept {
		ls = append(ls[:0], ls[len(ls)-layoutsKept+1:]...)
	}
	s.layouts[path] = append(ls, l)
}

// dropLayouts forgets the layouts of path (gone, or moved).
func (s *Spool) dropLayouts(path string) {
	s.lmu.Lock()
	delete(s.layouts, path)
	delete(s.ours, path)
	s.lmu.Unlock()
}

// userPart is userContent(data) for a version of path, without parsing
// when the version is one an edit produced.
func (s *Spool) userPart(path string, data []byte) []byte {
	if l, ok := s.layoutOf(path, data); ok {
		return splice(data, l.start, l.end, nil, nil)
	}
	return userContent(data)
}

// isGone reports an error of a file gone for the moment.
func isGone(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// ours is what the last write-back of a file left: the manifest's inode,
// size and times right after the exchange, and the status it holds.
type ours struct {
	ino        uint64
	size       int64
	mtim, ctim unix.Timespec
	status     [sha256.Size]byte
}

// statusSum identifies a status by its JSON form.
func statusSum(st *v1alpha1.TaskStatus) ([sha256.Size]byte, bool) {
	data, err := json.Marshal(st)
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256(data), true
}

// noteWritten records what a round that ended at the exchange left, when
// the edit was a status write-back with a known layout.
func (s *Spool) noteWritten(r *round) {
	if r.statusSum == nil {
		return
	}
	var st unix.Stat_t
	if unix.Fstatat(r.t.parent, r.t.leaf, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Ino != r.written {
		return
	}
	s.lmu.Lock()
	s.ours[r.path] = ours{ino: st.Ino, size: st.Size, mtim: st.Mtim, ctim: st.Ctim, status: *r.statusSum}
	s.lmu.Unlock()
}

// stillOurs reports whether the manifest at path (directly in the spool
// directory, not a symlink) is still the version a write-back left with
// this very status: same inode, size, modification and change times (any
// write, truncate, chmod or rename changes the change time). Writing it
// again would change nothing, so the group skips it without a read.
func (s *Spool) stillOurs(path string, status *v1alpha1.TaskStatus) bool {
	if status == nil {
		return false
	}
	s.lmu.Lock()
	o, ok := s.ours[path]
	s.lmu.Unlock()
	if !ok {
		return false
	}
	sum, ok := statusSum(status)
	if !ok || sum != o.status {
		return false
	}
	var st unix.Stat_t
	if unix.Fstatat(s.root.fd, filepath.Base(path), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Ino == o.ino && st.Size == o.size && st.Mtim == o.mtim && st.Ctim == o.ctim
}
