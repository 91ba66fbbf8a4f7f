package spool

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// fileState is what the watcher knows of one directory entry. Owned by the
// Run goroutine only.
type fileState struct {
	// id identifies the version last read.
	id FileIdentity
	// userKey hashes the user-owned part (everything but status) of the
	// version last emitted.
	userKey [sha256.Size]byte
	// last is the type of the last event emitted (0: none yet).
	last EventType
	// added is true once Added was emitted (until Deleted).
	added bool
	// pending is true while an unparseable version waits for Settle.
	pending bool
	// pendingHash is the content hash of that version.
	pendingHash [sha256.Size]byte
	// deadline is when the pending version is judged.
	deadline time.Time
	// ignored is why the entry is ignored ("" when it is not).
	ignored string
}

// unchanged reports whether lst (a regular file's Lstat) is the version f
// last read and judged: same inode, size and modification time.
func unchanged(f *fileState, lst fs.FileInfo) bool {
	if f.ignored != "" || f.pending || f.last == 0 || !lst.Mode().IsRegular() {
		return false
	}
	st, ok := lst.Sys().(*syscall.Stat_t)
	return ok && st.Ino == f.id.Inode && lst.Size() == f.id.Size && lst.ModTime().Equal(f.id.ModTime)
}

// watcher is the state of Run: the in-memory view of the directory.
type watcher struct {
	s       *Spool
	realDir string
	files   map[string]*fileState
	timer   clock.Timer
	armed   time.Time
}

// Run watches the spool until ctx ends, emitting on Events(), which it
// closes on return. It lists the directory at once, then takes fsnotify
// events as hints to re-read one file, relists every Options.Relist and at
// once when fsnotify reports an error (such as a queue overflow). Run must
// be called once. It returns nil when ctx ends, an error when the
// directory cannot be watched.
func (s *Spool) Run(ctx context.Context) error {
	defer close(s.events)
	realDir, err := filepath.EvalSymlinks(s.dir)
	if err != nil {
		return fmt.Errorf("spool %s: %w", s.dir, err)
	}
	fw, err := fsnotify.NewBufferedWatcher(1024)
	if err != nil {
		return fmt.Errorf("spool %s: watch: %w", s.dir, err)
	}
	defer fw.Close()
	if err := fw.Add(s.dir); err != nil {
		return fmt.Errorf("spool %s: watch: %w", s.dir, err)
	}
	w := &watcher{s: s, realDir: realDir, files: map[string]*fileState{}}
	if !w.relist(ctx) || !w.emit(ctx, Event{Type: Synced}) {
		return nil
	}
	ticker := s.opts.Clock.NewTicker(s.opts.Relist)
	defer ticker.Stop()
	defer func() {
		if w.timer != nil {
			w.timer.Stop()
		}
	}()
	w.arm()
	for {
		var settle <-chan time.Time
		if w.timer != nil && !w.armed.IsZero() {
			settle = w.timer.C()
		}
		ok := true
		select {
		case <-ctx.Done():
			return nil
		case ev, open := <-fw.Events:
			if !open {
				return fmt.Errorf("spool %s: watcher closed", s.dir)
			}
			base := filepath.Base(ev.Name)
			if filepath.Dir(ev.Name) == s.dir && IsManifestName(base) {
				ok = w.sync(ctx, base, false)
			}
		case err, open := <-fw.Errors:
			if !open {
				return fmt.Errorf("spool %s: watcher closed", s.dir)
			}
			s.log.Warn().Err(err).Msg("file watcher error, relisting the spool")
			ok = w.relist(ctx)
		case <-ticker.C():
			ok = w.relist(ctx)
		case <-settle:
			w.armed = time.Time{}
			ok = w.settle(ctx)
		}
		if !ok {
			return nil
		}
		w.arm()
	}
}

// arm sets the settle timer to the earliest pending deadline.
func (w *watcher) arm() {
	var next time.Time
	for _, f := range w.files {
		if f.pending && (next.IsZero() || f.deadline.Before(next)) {
			next = f.deadline
		}
	}
	if next.IsZero() || next.Equal(w.armed) {
		return
	}
	d := next.Sub(w.s.opts.Clock.Now())
	if d < 0 {
		d = 0
	}
	if w.timer == nil {
		w.timer = w.s.opts.Clock.NewTimer(d)
	} else {
		if !w.timer.Stop() && !w.armed.IsZero() {
			select { // drain a fire we have not consumed
			case <-w.timer.C():
			default:
			}
		}
		w.timer.Reset(d)
	}
	w.armed = next
}

// settle judges the pending files whose quiet period is over.
func (w *watcher) settle(ctx context.Context) bool {
	now := w.s.opts.Clock.Now()
	for base, f := range w.files {
		if f.pending && !f.deadline.After(now) {
			if !w.sync(ctx, base, true) {
				return false
			}
		}
	}
	return true
}

// relist reads the directory, syncs every manifest and reports the vanished
// ones. It returns false when ctx ended.
func (w *watcher) relist(ctx context.Context) bool {
	entries, err := os.ReadDir(w.s.dir)
	if err != nil {
		w.s.log.Error().Err(err).Msg("cannot list the spool")
		return true
	}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		base := e.Name()
		if !IsManifestName(base) {
			continue
		}
		seen[base] = true
		if !w.sync(ctx, base, false) {
			return false
		}
	}
	for base := range w.files {
		if !seen[base] && !w.gone(ctx, base) {
			return false
		}
	}
	return true
}

// gone forgets a file and emits Deleted if anything was emitted for it.
func (w *watcher) gone(ctx context.Context, base string) bool {
	f := w.files[base]
	if f == nil {
		return true
	}
	delete(w.files, base)
	if f.last == 0 {
		return true
	}
	return w.emit(ctx, Event{Type: Deleted, Path: filepath.Join(w.s.dir, base), Name: manifestName(base)})
}

// ignore records why a file is ignored, logs it once, and withdraws the
// file if it was known.
func (w *watcher) ignore(ctx context.Context, base, reason string) bool {
	f := w.files[base]
	if f != nil && f.ignored == reason {
		return true
	}
	w.s.log.Warn().Str("file", base).Str("reason", reason).Msg("ignoring manifest")
	ok := w.gone(ctx, base)
	w.files[base] = &fileState{ignored: reason}
	return ok
}

// sync re-reads one file and emits what changed. settled is true when the
// settle timer of a pending unparseable version fired. It returns false
// when ctx ended.
func (w *watcher) sync(ctx context.Context, base string, settled bool) bool {
	path := filepath.Join(w.s.dir, base)
	lst, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return w.gone(ctx, base)
	}
	if err != nil {
		w.s.log.Warn().Err(err).Str("file", base).Msg("cannot stat manifest")
		return true
	}
	if lst.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(path)
		if errors.Is(err, fs.ErrNotExist) {
			return w.ignore(ctx, base, "dangling symlink")
		}
		if err != nil {
			return w.ignore(ctx, base, fmt.Sprintf("symlink cannot be resolved: %v", err))
		}
		if rel, err := filepath.Rel(w.realDir, target); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return w.ignore(ctx, base, fmt.Sprintf("symlink resolves outside the spool, to %s", target))
		}
	}
	if f := w.files[base]; f != nil && !settled && unchanged(f, lst) {
		// The version last read, untouched: a relist of a large spool of
		// finished manifests reads nothing.
		return true
	}
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return w.gone(ctx, base)
	}
	if err != nil {
		w.s.log.Warn().Err(err).Str("file", base).Msg("cannot open manifest")
		return true
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		w.s.log.Warn().Err(err).Str("file", base).Msg("cannot stat manifest")
		return true
	}
	if !fi.Mode().IsRegular() {
		return w.ignore(ctx, base, "not a regular file")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != w.s.euid && st.Uid != 0 {
		return w.ignore(ctx, base, fmt.Sprintf("owned by uid %d, neither this controller's user (uid %d) nor root", st.Uid, w.s.euid))
	}
	f := w.files[base]
	if f == nil || f.ignored != "" {
		if f != nil {
			w.s.log.Info().Str("file", base).Msg("manifest no longer ignored")
		}
		f = &fileState{}
		w.files[base] = f
	}
	id, data, _, err := readVersion(file, w.s.opts.MaxFileSize)
	if errors.Is(err, ErrTooLarge) {
		id := FileIdentity{Size: fi.Size(), ModTime: fi.ModTime()}
		if f.last == Refused && f.id.Size == id.Size && f.id.ModTime.Equal(id.ModTime) {
			return true
		}
		f.id, f.pending = id, false
		f.last = Refused
		w.s.log.Warn().Str("file", base).Int64("size", fi.Size()).Msg("manifest refused: larger than the size limit")
		return w.emit(ctx, Event{Type: Refused, Path: path, Name: manifestName(base), Identity: id,
			Err: fmt.Errorf("%s: %w: %d bytes, the limit is %d bytes", base, ErrTooLarge, fi.Size(), w.s.opts.MaxFileSize)})
	}
	if err != nil {
		w.s.log.Warn().Err(err).Str("file", base).Msg("cannot read manifest")
		return true
	}
	f.id = id
	key := sha256.Sum256(userContent(data))
	if f.last != 0 && f.last != Refused && key == f.userKey {
		// Nothing the user owns changed (e.g. our own status write-back).
		f.pending = false
		return true
	}
	task, perr := v1alpha1.ParseManifest(base, data)
	var syn *v1alpha1.SyntaxError
	if errors.As(perr, &syn) || (perr != nil && task == nil) {
		now := w.s.opts.Clock.Now()
		// A broken file untouched for the settle period already is quiet
		// (the real clock: modification times are real): judge it now, so
		// that a spool listed at start reports it with the rest.
		quiet := time.Since(id.ModTime) >= w.s.opts.Settle
		switch {
		case quiet:
		case !f.pending || f.pendingHash != id.Hash:
			// New broken version: wait until it has been quiet for Settle.
			f.pending, f.pendingHash, f.deadline = true, id.Hash, now.Add(w.s.opts.Settle)
			return true
		case !settled:
			return true
		}
		f.pending = false
		f.userKey, f.last = key, Invalid
		w.s.log.Warn().Err(perr).Str("file", base).Msg("manifest is not parseable YAML")
		return w.emit(ctx, Event{Type: Invalid, Path: path, Name: manifestName(base), Data: data, Err: perr, Identity: id})
	}
	typ := Modified
	if !f.added {
		typ = Added
	}
	f.pending, f.added, f.userKey, f.last = false, true, key, typ
	return w.emit(ctx, Event{Type: typ, Path: path, Name: manifestName(base), Data: data, Task: task, Err: perr, Identity: id})
}

// emit sends ev, waiting for room: events are never dropped. It returns
// false when ctx ended first.
func (w *watcher) emit(ctx context.Context, ev Event) bool {
	select {
	case w.s.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}
