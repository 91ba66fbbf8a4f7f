package spool

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
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
	// added is true once Added (or Renamed) was emitted (until Deleted).
	added bool
	// name is the metadata.name of the task last emitted.
	name string
	// pending is true while the file waits to be read again at deadline:
	// an unparseable version waiting for Settle (pendingHash is its content
	// hash), or, when quiet is set, a file no lease could tell about that
	// was modified less than Settle ago.
	pending     bool
	quiet       bool
	pendingHash [sha256.Size]byte
	deadline    time.Time
	// writing is true while some process holds the file open for writing
	// (the read lease was refused): it is read again once closed.
	writing bool
	// vanishedAt is when the file was last seen gone (zero: present);
	// Deleted is emitted DeleteGrace later unless it is back by then.
	vanishedAt time.Time
	// ignored is why the entry is ignored ("" when it is not).
	ignored string
	// counted says the file is counted in Spool.unsettled (recount).
	counted bool
	// refusedCounted says the file is counted in Spool.refused (recount).
	refusedCounted bool
}

// waiting reports whether the spool waits on f before it can say what it
// holds: held open for writing, or pending its settle period.
func (f *fileState) waiting() bool {
	return f.ignored == "" && f.vanishedAt.IsZero() && (f.writing || f.pending)
}

// recount brings Spool.unsettled up to date with the file base; it may be
// called any number of times (gone uncounts a file it forgets).
func (w *watcher) recount(base string) {
	f := w.files[base]
	if f == nil {
		return
	}
	if f.refusedCounted != (f.ignored != "") {
		f.refusedCounted = !f.refusedCounted
		if f.refusedCounted {
			w.s.refused.Add(1)
		} else {
			w.s.refused.Add(-1)
		}
	}
	if f.counted == f.waiting() {
		return
	}
	f.counted = !f.counted
	if f.counted {
		w.s.unsettled.Add(1)
	} else {
		w.s.unsettled.Add(-1)
	}
}

// unchanged reports whether st (the judged file's stat) is the version f
// last read and judged: same inode, size and modification time.
func unchanged(f *fileState, st *unix.Stat_t) bool {
	if f.ignored != "" || f.pending || f.writing || f.last == 0 {
		return false
	}
	mtime := time.Unix(st.Mtim.Unix())
	return st.Ino == f.id.Inode && st.Size == f.id.Size && mtime.Equal(f.id.ModTime)
}

// syncCause says why a file is synced.
type syncCause int

const (
	// causeHint: an event or a listing named the file.
	causeHint syncCause = iota
	// causeClosed: the kernel said its writer closed it, or it was renamed
	// into place.
	causeClosed
	// causeTimer: its settle or quiet period, or its deletion grace, ended.
	causeTimer
)

// watcher is the state of Run: the in-memory view of the directory.
type watcher struct {
	s     *Spool
	files map[string]*fileState
	// timed holds the names of the files that may have a deadline (in
	// their deletion grace, or pending): a superset, pruned by arm, so
	// that the timer and the rename search never walk the whole spool.
	timed map[string]struct{}
	timer clock.Timer
	armed time.Time
}

// Run watches the spool until ctx ends, emitting on Events(), which it
// closes on return. It first removes the temporary files a killed
// controller left (only this package's, by exact name), lists the
// directory, then takes inotify events as hints to re-read one file,
// relists every Options.Relist and at once when the kernel's event queue
// overflowed. Deferred write-backs are made while it runs. Run must be
// called once, by the only controller of the spool (see Lock). It returns
// nil when ctx ends, an error when the directory cannot be watched.
func (s *Spool) Run(ctx context.Context) error {
	s.started.Store(true)
	defer close(s.runDone)
	defer close(s.events)
	s.removeLeftovers()
	dw, err := watchSpool(s.dir)
	relistLeast := s.opts.Relist
	if err != nil {
		if !errors.Is(err, unix.EMFILE) && !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.ENFILE) {
			return fmt.Errorf("spool %s: watch: %w", s.dir, err)
		}
		// The user's inotify instances or watches are exhausted (other
		// programs hold them): the listing is the truth, events only
		// hints; the spool is listed every second instead.
		s.log.Warn().Err(err).Dur("every", pollRelist).Msg("no file watcher for the spool (inotify limits reached: fs.inotify.max_user_instances, max_user_watches); listing it instead")
		dw, relistLeast = &dirWatch{}, min(relistLeast, pollRelist)
	}
	defer dw.close()
	if s.moved() {
		// Moved between Open and the watch: the watch is on whatever is at
		// the path now, not on the spool.
		return fmt.Errorf("spool %s: watch: %w", s.dir, errDirGone)
	}
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	retryDone, retryExited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(retryExited)
		s.retryLoop(retryDone, time.Second)
	}()
	defer func() {
		close(retryDone)
		<-retryExited
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	w := &watcher{s: s, files: map[string]*fileState{}, timed: map[string]struct{}{}}
	if !w.relist(ctx) || !w.emit(ctx, Event{Type: Synced}) {
		return nil
	}
	relistT := s.opts.Clock.NewTimer(relistLeast)
	defer relistT.Stop()
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
		case ev, open := <-dw.events:
			if !open {
				select {
				case err := <-dw.errs:
					return fmt.Errorf("spool %s: watch: %w", s.dir, err)
				default:
					return fmt.Errorf("spool %s: watcher closed", s.dir)
				}
			}
			if IsManifestName(ev.name) {
				cause := causeHint
				if ev.closed() {
					cause = causeClosed
				}
				ok = w.sync(ctx, ev.name, cause)
			}
		case err := <-dw.errs:
			if !errors.Is(err, errOverflow) {
				return fmt.Errorf("spool %s: watch: %w", s.dir, err)
			}
			s.log.Warn().Err(err).Msg("file watcher overflow, relisting the spool")
			ok = w.relist(ctx)
		case <-relistT.C():
			if s.moved() {
				return fmt.Errorf("spool %s: %w", s.dir, errDirGone)
			}
			start := s.opts.Clock.Now()
			ok = w.relist(ctx)
			relistT.Reset(relistPeriod(relistLeast, s.opts.Clock.Since(start)))
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

// moved reports whether the spool's path no longer leads to the
// directory Open opened (moved or removed, and maybe made anew by
// someone): its events would be another directory's.
func (s *Spool) moved() bool {
	var at, opened unix.Stat_t
	if err := unix.Fstat(s.root.fd, &opened); err != nil {
		return false
	}
	if err := unix.Stat(s.dir, &at); err != nil {
		return errors.Is(err, unix.ENOENT)
	}
	return at.Dev != opened.Dev || at.Ino != opened.Ino
}

// pollRelist is the least period of the listing of a spool no inotify
// watch could be had for.
const pollRelist = time.Second

// watchSpool starts the spool directory's watch: watchDir, a variable so
// that a test can have the kernel refuse it.
var watchSpool = watchDir

// relistShare is how many times the last periodic listing's duration the
// next one waits at least: listing takes at most 1/relistShare of a core.
const relistShare = 500

// relistPeriod is the wait before the next periodic listing: least, or
// relistShare times what the last one took when that is longer.
func relistPeriod(least, took time.Duration) time.Duration {
	return max(least, relistShare*took)
}

// removeLeftovers removes the temporary files of write-backs a killed
// process left in the spool directory: regular files whose name matches
// tmpPattern exactly, nothing else.
func (s *Spool) removeLeftovers() {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	n := removeTmpIn(s.root.fd, ents)
	// A write-back through a symlink makes its dotfile beside the link's
	// target: look in those directories too (reached by the checked path).
	seen := map[string]bool{".": true}
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink == 0 || !IsManifestName(e.Name()) {
			continue
		}
		t, err := s.root.resolve(e.Name())
		if err != nil {
			continue
		}
		if d := filepath.Dir(t.rel); !seen[d] {
			seen[d] = true
			if sub, err := os.ReadDir(filepath.Join(s.dir, d)); err == nil {
				n += removeTmpIn(t.parent, sub)
			}
		}
		t.close()
	}
	if n > 0 {
		s.log.Info().Int("files", n).Msg("removed temporary files a previous write-back left")
	}
}

// removeTmpIn removes, in the directory dirfd whose entries are ents, the
// regular files whose name matches tmpPattern; it returns how many.
func removeTmpIn(dirfd int, ents []os.DirEntry) int {
	n := 0
	for _, e := range ents {
		if !tmpPattern.MatchString(e.Name()) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(dirfd, e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if err := unix.Unlinkat(dirfd, e.Name(), 0); err == nil {
			n++
		}
	}
	return n
}

// deadline is when f next needs the timer (zero: never).
func (w *watcher) deadline(f *fileState) time.Time {
	switch {
	case !f.vanishedAt.IsZero():
		return f.vanishedAt.Add(w.s.opts.DeleteGrace)
	case f.pending:
		return f.deadline
	}
	return time.Time{}
}

// arm sets the timer to the earliest deadline, and forgets the timed
// names that have none any more.
func (w *watcher) arm() {
	var next time.Time
	for base := range w.timed {
		f := w.files[base]
		if f == nil {
			delete(w.timed, base)
			continue
		}
		d := w.deadline(f)
		if d.IsZero() {
			delete(w.timed, base)
			continue
		}
		if next.IsZero() || d.Before(next) {
			next = d
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

// settle handles the files whose deadline passed.
func (w *watcher) settle(ctx context.Context) bool {
	now := w.s.opts.Clock.Now()
	var due []string
	for base := range w.timed {
		if f := w.files[base]; f != nil {
			if d := w.deadline(f); !d.IsZero() && !d.After(now) {
				due = append(due, base)
			}
		}
	}
	for _, base := range due {
		if !w.sync(ctx, base, causeTimer) {
			return false
		}
	}
	return true
}

// relist reads the directory and syncs every manifest. The vanished ones
// are marked first, so that a rename found by a listing is one.
func (w *watcher) relist(ctx context.Context) bool {
	entries, err := os.ReadDir(w.s.dir)
	if err != nil {
		w.s.log.Error().Err(err).Msg("cannot list the spool")
		return true
	}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		if IsManifestName(e.Name()) {
			seen[e.Name()] = true
		}
	}
	for base := range w.files {
		if !seen[base] && !w.vanish(ctx, base, causeHint) {
			return false
		}
	}
	for _, e := range entries {
		if seen[e.Name()] && !w.sync(ctx, e.Name(), causeHint) {
			return false
		}
	}
	return true
}

// vanish handles a file found gone: a task's file gets DeleteGrace to come
// back (or to show up renamed); anything else is forgotten at once.
func (w *watcher) vanish(ctx context.Context, base string, cause syncCause) bool {
	defer w.recount(base)
	f := w.files[base]
	if f == nil {
		return true
	}
	if !f.added || (cause == causeTimer && !f.vanishedAt.IsZero()) {
		return w.gone(ctx, base)
	}
	if f.vanishedAt.IsZero() {
		f.vanishedAt = w.s.opts.Clock.Now()
		f.pending, f.writing = false, false
		w.timed[base] = struct{}{}
	}
	return true
}

// gone forgets a file and emits Deleted if anything was emitted for it.
func (w *watcher) gone(ctx context.Context, base string) bool {
	f := w.files[base]
	if f == nil {
		return true
	}
	if f.counted {
		w.s.unsettled.Add(-1)
	}
	if f.refusedCounted {
		w.s.refused.Add(-1)
	}
	delete(w.files, base)
	path := filepath.Join(w.s.dir, base)
	w.s.dropDeferred(path)
	if f.last == 0 {
		return true
	}
	return w.emit(ctx, Event{Type: Deleted, Path: path, Name: manifestName(base)})
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

// sync re-reads one file and emits what changed. It returns false when
// ctx ended.
func (w *watcher) sync(ctx context.Context, base string, cause syncCause) bool {
	defer w.recount(base)
	path := filepath.Join(w.s.dir, base)
	if f := w.files[base]; f != nil && cause != causeTimer && f.vanishedAt.IsZero() {
		// The version last read, untouched by what a stat shows: a relist
		// of a large spool of finished manifests opens nothing. A link,
		// or a file that changed, is judged and opened below.
		if st, ok := w.s.root.statPlain(base); ok && unchanged(f, &st) {
			w.s.kick(path)
			return true
		}
	}
	t, file, err := w.s.root.openFile(base)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		return w.vanish(ctx, base, cause)
	case errors.Is(err, errDangling), errors.Is(err, ErrOutsideSpool), errors.Is(err, ErrNotRegular), errors.Is(err, ErrForeignOwner):
		return w.ignore(ctx, base, err.Error())
	default:
		w.s.log.Warn().Err(err).Str("file", base).Msg("cannot open manifest")
		return true
	}
	defer t.close()
	defer file.Close()
	f := w.files[base]
	if f == nil || f.ignored != "" {
		if f != nil {
			w.s.log.Info().Str("file", base).Msg("manifest no longer ignored")
			if f.refusedCounted {
				w.s.refused.Add(-1)
			}
		}
		f = &fileState{}
		w.files[base] = f
	}
	if !f.vanishedAt.IsZero() {
		f.vanishedAt = time.Time{} // back within the grace: the same manifest
	}
	if cause != causeTimer && unchanged(f, &t.st) {
		// Untouched since it was read (through a link, or a file that
		// had vanished and is back, the same version).
		w.s.kick(path)
		return true
	}
	now := w.s.opts.Clock.Now()
	switch takeLease(file) {
	case leaseBusy:
		// Someone holds it open for writing: it is read once closed.
		f.writing = true
		return true
	case leaseGranted:
		// Until released, no writer can start: the read is consistent.
		defer releaseLease(file)
	case leaseUnsupported:
		// No way to know whether a writer is done but the kernel's word
		// (causeClosed) or a quiet period.
		mtime := time.Unix(t.st.Mtim.Unix())
		if age := time.Since(mtime); cause != causeClosed && age < w.s.opts.Settle {
			f.pending, f.quiet, f.deadline = true, true, now.Add(w.s.opts.Settle-age)
			w.timed[base] = struct{}{}
			return true
		}
	}
	f.writing, f.quiet = false, false
	id, data, _, err := readVersion(file, w.s.opts.MaxFileSize)
	if errors.Is(err, ErrTooLarge) {
		id := FileIdentity{Inode: t.st.Ino, Size: t.st.Size, ModTime: time.Unix(t.st.Mtim.Unix())}
		if f.last == Refused && f.id.Size == id.Size && f.id.ModTime.Equal(id.ModTime) {
			return true
		}
		f.id, f.pending = id, false
		f.last = Refused
		w.s.log.Warn().Str("file", base).Int64("size", t.st.Size).Msg("manifest refused: larger than the size limit")
		return w.emit(ctx, Event{Type: Refused, Path: path, Name: manifestName(base), Identity: id,
			Err: fmt.Errorf("%s: %w: %d bytes, the limit is %d bytes", base, ErrTooLarge, t.st.Size, w.s.opts.MaxFileSize)})
	}
	if err != nil {
		w.s.log.Warn().Err(err).Str("file", base).Msg("cannot read manifest")
		return true
	}
	defer w.s.kick(path)
	// A new inode under a name that holds a task, while another manifest of
	// the same task is in its deletion grace: that one was moved here (mv
	// a.yaml b.yaml, b.yaml a duplicate of a's task).
	movedHere := f.added && f.id.Inode != id.Inode && w.renamedFrom(base, f.name) != ""
	f.id = id
	key := sha256.Sum256(w.s.userPart(path, data))
	if f.last != 0 && f.last != Refused && key == f.userKey && !movedHere {
		// Nothing the user owns changed (e.g. our own status write-back).
		f.pending = false
		return true
	}
	task, perr := v1alpha1.ParseManifest(base, data)
	var syn *v1alpha1.SyntaxError
	if errors.As(perr, &syn) || (perr != nil && task == nil) {
		// A broken file untouched for the settle period already is quiet
		// (the real clock: modification times are real): judge it now, so
		// that a spool listed at start reports it with the rest.
		quiet := time.Since(id.ModTime) >= w.s.opts.Settle
		switch {
		case quiet:
		case !f.pending || f.pendingHash != id.Hash:
			// New broken version: wait until it has been quiet for Settle.
			f.pending, f.pendingHash, f.deadline = true, id.Hash, now.Add(w.s.opts.Settle)
			w.timed[base] = struct{}{}
			return true
		case cause != causeTimer:
			return true
		}
		f.pending = false
		f.userKey, f.last = key, Invalid
		w.s.log.Warn().Err(perr).Str("file", base).Msg("manifest is not parseable YAML")
		return w.emit(ctx, Event{Type: Invalid, Path: path, Name: manifestName(base), Data: data, Err: perr, Identity: id})
	}
	ev := Event{Type: Modified, Path: path, Name: manifestName(base), Data: data, Task: task, Err: perr, Identity: id}
	name := task.Metadata.Name
	if !f.added || f.name != name || movedHere {
		if from := w.renamedFrom(base, name); from != "" {
			// The task the file held before is replaced; one of the same
			// name is the moved task's (the reconciler sorts out which).
			if f.added && f.name != name && !w.gone(ctx, base) {
				return false
			}
			if old := w.files[from]; old != nil && old.counted {
				w.s.unsettled.Add(-1)
			}
			if old := w.files[from]; old != nil && old.refusedCounted {
				w.s.refused.Add(-1)
			}
			w.files[base] = f
			delete(w.files, from)
			ev.Type, ev.OldPath = Renamed, filepath.Join(w.s.dir, from)
			w.s.dropDeferred(ev.OldPath)
			w.s.dropDeferred(path) // a write-back of what the file held before
			f.added = true
		}
	}
	if !f.added {
		ev.Type = Added
	}
	f.pending, f.added, f.userKey, f.last, f.name = false, true, key, ev.Type, name
	return w.emit(ctx, ev)
}

// renamedFrom returns the vanished manifest (still in its deletion grace)
// whose task had metadata.name name, "" if none.
func (w *watcher) renamedFrom(base, name string) string {
	if name == "" {
		return ""
	}
	for b := range w.timed { // every vanished file is timed
		if f := w.files[b]; f != nil && b != base && f.added && !f.vanishedAt.IsZero() && f.name == name {
			return b
		}
	}
	return ""
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
