package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// ErrSharedSpool reports a spool directory writable by group or others.
var ErrSharedSpool = errors.New("spool directory is writable by group or others")

// ErrOutsideSpool reports a path that is not a manifest of this spool.
var ErrOutsideSpool = errors.New("path is not in the spool directory")

// ErrDeferred is wrapped by a WriteStatus error when the write could not
// be made now (the file is held open for writing, keeps changing, or is
// gone for the moment, as during an editor's save) and will be made by the
// spool when the file is closed or reappears, or within a second. The
// latest status of a path wins.
var ErrDeferred = errors.New("write-back deferred")

// Defaults of Options.
const (
	DefaultRelist         = 10 * time.Second
	DefaultSettle         = 300 * time.Millisecond
	DefaultDeleteGrace    = 3 * time.Second
	DefaultBusyWait       = 50 * time.Millisecond
	DefaultDisplacedGrace = 100 * time.Millisecond
)

// Options tune a Spool; zero fields take the defaults.
type Options struct {
	// AllowShared accepts a spool directory writable by group or others
	// (the --allow-shared-spool flag).
	AllowShared bool
	// Relist is the least period of the full directory listing (default
	// 10 s); a spool whose listing takes longer than Relist/relistShare
	// (20 ms at 10 s) is listed every relistShare times that long, so that
	// listing takes at most a five-hundredth of a core (ten thousand
	// manifests: 40–60 ms a listing on a slow machine, every 20–30 s).
	Relist time.Duration
	// Settle is how long an unparseable file must stay unchanged before it
	// is declared Invalid (default 300 ms).
	Settle time.Duration
	// MaxFileSize is the largest manifest read (default 1 MiB).
	MaxFileSize int64
	// DeleteGrace is how long a vanished manifest may take to reappear
	// (an editor's save) or to show up under another file name with the
	// same metadata.name (a rename) before Deleted is emitted (default 3 s).
	DeleteGrace time.Duration
	// BusyWait is how long a write-back waits for a writer holding the
	// manifest open to close it (default 50 ms); then it is deferred.
	BusyWait time.Duration
	// DisplacedGrace is how long the version a write-back displaced is
	// kept open and watched for writes that still reach it (default 100 ms).
	DisplacedGrace time.Duration
	// Clock drives the relist ticker and the settle timers (default: real).
	Clock clock.WithTicker
	// Logger receives the reasons files are ignored (the zero value
	// discards).
	Logger zerolog.Logger
}

// EventType says what happened to a manifest.
type EventType int

// The event types.
const (
	// Added: the first parseable version of a file (since it appeared or
	// was last Deleted). Task is non-nil; Err is set when it is invalid.
	Added EventType = iota + 1
	// Modified: a new parseable version of a file already Added. Task is
	// non-nil; Err is set when it is invalid.
	Modified
	// Deleted: the file is gone (or is now ignored). Only Path and Name are
	// set. A manifest that vanishes is reported Deleted only after
	// Options.DeleteGrace, if it has not come back meanwhile.
	Deleted
	// Invalid: the file is not parseable YAML and stayed so for the settle
	// period. Task is nil; Err is the *v1alpha1.SyntaxError. It does not
	// undo an earlier Added.
	Invalid
	// Refused: the file is too large to read. Err says why.
	Refused
	// Synced: the first listing is complete; every manifest present when
	// Run started was reported before it. Sent once; only Type is set.
	Synced
	// Renamed: the manifest that was at OldPath (Added, then vanished
	// less than Options.DeleteGrace ago) is now at Path, with the same
	// metadata.name. Task, Data and Err are those of the file at Path; no
	// Deleted follows for OldPath.
	Renamed
)

// String returns the type's name.
func (t EventType) String() string {
	switch t {
	case Added:
		return "Added"
	case Modified:
		return "Modified"
	case Deleted:
		return "Deleted"
	case Invalid:
		return "Invalid"
	case Refused:
		return "Refused"
	case Synced:
		return "Synced"
	case Renamed:
		return "Renamed"
	default:
		return fmt.Sprintf("EventType(%d)", int(t))
	}
}

// Event reports one change of one manifest. Events of one file arrive in
// the order the changes were seen.
type Event struct {
	// Type is what happened.
	Type EventType
	// Path is the manifest's path (spool directory joined with its name).
	Path string
	// OldPath is where a Renamed manifest was.
	OldPath string
	// Name is the file's base name without its extension.
	Name string
	// Data is the bytes read (nil for Deleted).
	Data []byte
	// Task is the decoded manifest (nil for Deleted, Invalid, Refused).
	Task *v1alpha1.Task
	// Err is the parse or validation error, or why the file is refused.
	Err error
	// Identity identifies the bytes read.
	Identity FileIdentity
}

// Spool watches one spool directory and writes status back into its
// manifests. Run owns the view of the directory; WriteStatus and SetPaused
// may be called from any goroutine.
type Spool struct {
	dir    string
	root   *root
	opts   Options
	log    zerolog.Logger
	events chan Event
	euid   int
	stats  editStats
	// retry carries paths whose deferred write-back may succeed now.
	retry chan string

	// mu guards locks (the per-path write-back locks), deferred, lastEdit
	// and running. Lock order: a path lock, then mu; a path lock is never
	// taken while mu is held. kmu is taken alone.
	mu       sync.Mutex
	locks    map[string]*pathLock
	deferred map[string]*editFunc
	lastEdit map[string]editFunc
	running  bool

	// lmu guards layouts (the status layouts of the versions of each
	// manifest that write-backs produced, see statusEdit) and ours (what
	// the last group write-back of each left, see stillOurs). Taken alone.
	lmu     sync.Mutex
	layouts map[string][]statusLayout
	ours    map[string]ours

	// kmu guards kept, keeperOn and closing: the displaced inodes under
	// watch, and whether Close began (no keeper starts after it).
	kmu      sync.Mutex
	kept     []*kept
	keeperOn bool
	closing  bool
	keepers  sync.WaitGroup

	// started is set by Run; runDone is closed when Run returns.
	started atomic.Bool
	runDone chan struct{}
	// unsettled counts the files Run waits on before it can say what they
	// are (held open for writing, or waiting for their settle period).
	unsettled atomic.Int64
	// refused counts the manifests ignored with a reason (recount).
	refused atomic.Int64
}

// Unsettled is how many manifests the spool is waiting on before it can
// say what they hold: held open for writing (a slow download), or
// changed too recently to be judged. Any goroutine.
func (s *Spool) Unsettled() int { return int(s.unsettled.Load()) }

// Refused is how many manifests (*.yaml, *.yml) the spool ignores with a
// logged reason, now: what the checked path refuses (owned by another
// user, root-owned under a controller that is not root, a link leading
// out of the spool or nowhere, not a regular file). None of them is
// served; --exit-when-done counts them as not Done. Any goroutine.
func (s *Spool) Refused() int { return int(s.refused.Load()) }

// pathLock serialises the write-backs of one path.
type pathLock struct {
	sync.Mutex
	refs int
}

// Open checks dir and returns a Spool for it; it creates nothing. It
// refuses, with ErrSharedSpool, a directory writable by group or others
// unless opts.AllowShared.
func Open(dir string, opts Options) (*Spool, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("spool %s: not a directory", abs)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 && !opts.AllowShared {
		return nil, fmt.Errorf("spool %s has mode %#o: %w (manifests run commands as this controller's user); fix it with chmod go-w or pass --allow-shared-spool", abs, perm, ErrSharedSpool)
	}
	if opts.Relist <= 0 {
		opts.Relist = DefaultRelist
	}
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.MaxFileSize <= 0 {
		opts.MaxFileSize = DefaultMaxFileSize
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.DeleteGrace <= 0 {
		opts.DeleteGrace = DefaultDeleteGrace
	}
	if opts.BusyWait <= 0 {
		opts.BusyWait = DefaultBusyWait
	}
	if opts.DisplacedGrace <= 0 {
		opts.DisplacedGrace = DefaultDisplacedGrace
	}
	r, err := openRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	log := opts.Logger
	return &Spool{
		dir:      abs,
		root:     r,
		opts:     opts,
		log:      log.With().Str("spool", abs).Logger(),
		events:   make(chan Event, 256),
		euid:     os.Geteuid(),
		retry:    make(chan string, 64),
		locks:    map[string]*pathLock{},
		deferred: map[string]*editFunc{},
		lastEdit: map[string]editFunc{},
		layouts:  map[string][]statusLayout{},
		ours:     map[string]ours{},
		runDone:  make(chan struct{}),
	}, nil
}

// Close waits for Run to return (its context must be ended) and for the
// versions displaced by write-backs to be out of their grace period
// (merging what reached them), then releases the spool directory. A
// write-back after Close fails.
func (s *Spool) Close() {
	if s.started.Load() {
		<-s.runDone
	}
	s.kmu.Lock()
	s.closing = true
	s.kmu.Unlock()
	s.keepers.Wait()
	s.root.close()
}

// Dir returns the spool directory's absolute path.
func (s *Spool) Dir() string { return s.dir }

// Events returns the stream of manifest events. It is closed when Run returns.
func (s *Spool) Events() <-chan Event { return s.events }

// WriteStatus replaces the status block of the manifest at path with
// status, keeping every other byte, atomically and without losing a
// concurrent user edit (see EditFile). A file that is not a YAML mapping is
// never rewritten (the error wraps ErrNotRewritable). Safe for concurrent
// use; write-backs of the same path are serialised.
//
// When a writer holds the file open for writing for longer than
// Options.BusyWait, or keeps changing it (ErrConflict), or the file is
// gone for the moment, and Run is running, the write is deferred (the error wraps ErrDeferred) and made by
// the spool once the file is closed or back; a later WriteStatus of the
// same path replaces it, a Deleted or Renamed event drops it.
func (s *Spool) WriteStatus(path string, status *v1alpha1.TaskStatus) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("edit %s: %w", path, err)
	}
	err = s.edit(abs, s.statusEdit(abs, status))
	if errors.Is(err, ErrBusy) || errors.Is(err, ErrConflict) || errors.Is(err, fs.ErrNotExist) {
		// The deferred write runs later, on the spool's goroutine: it gets
		// its own copy, never the caller's status, which the caller goes on
		// changing.
		own, cerr := cloneStatus(status)
		if cerr == nil && s.deferEdit(abs, s.statusEdit(abs, own)) {
			return fmt.Errorf("%w: %w", ErrDeferred, err)
		}
	}
	return err
}

// cloneStatus returns a deep copy of st.
func cloneStatus(st *v1alpha1.TaskStatus) (*v1alpha1.TaskStatus, error) {
	if st == nil {
		return nil, nil
	}
	data, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	var out v1alpha1.TaskStatus
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetPaused sets spec.paused in the manifest at path (see SetSpecPaused),
// with the same guarantees as WriteStatus.
func (s *Spool) SetPaused(path string, paused bool) error {
	return s.edit(path, func(b []byte) ([]byte, error) { return SetSpecPaused(b, paused) })
}

// SetRetryToken sets spec.retryToken in the manifest at path (SetSpecRetryToken),
// as SetPaused does: a new token is a new generation, the retry verb's way
// to run a Failed task again.
func (s *Spool) SetRetryToken(path, token string) error {
	return s.edit(path, func(b []byte) ([]byte, error) { return SetSpecRetryToken(b, token) })
}

// SetRestartToken sets spec.restartToken in the manifest at path
// (SetSpecRestartToken), as SetRetryToken does: the restart verb's way to
// apply a waiting edit now.
func (s *Spool) SetRestartToken(path, token string) error {
	return s.edit(path, func(b []byte) ([]byte, error) { return SetSpecRestartToken(b, token) })
}

// edit applies edit to the manifest at path under its path lock, and
// records it as the path's last edit (the one a merge re-applies).
func (s *Spool) edit(path string, edit func([]byte) ([]byte, error)) error {
	return s.editAs(path, edit, true)
}

// editAs is edit; a merge (record false) is neither recorded nor
// supersedes a deferred write-back.
func (s *Spool) editAs(path string, edit func([]byte) ([]byte, error), record bool) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("edit %s: %w", path, err)
	}
	if filepath.Dir(abs) != s.dir || !IsManifestName(filepath.Base(abs)) {
		return fmt.Errorf("edit %s: %w %s", path, ErrOutsideSpool, s.dir)
	}
	l := s.lock(abs)
	defer s.unlock(abs, l)
	if record {
		s.mu.Lock()
		s.lastEdit[abs] = edit
		s.mu.Unlock()
	}
	if err := s.editFile(abs, edit); err != nil {
		return fmt.Errorf("write-back: %w", err)
	}
	if record {
		s.mu.Lock()
		delete(s.deferred, abs) // superseded
		s.mu.Unlock()
	}
	return nil
}

// lastEditOf returns the edit last applied to path (the one a merge
// re-applies), nil if none.
func (s *Spool) lastEditOf(path string) editFunc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastEdit[path]
}

// deferEdit records edit as path's deferred write-back when Run runs.
func (s *Spool) deferEdit(path string, edit editFunc) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return false
	}
	s.deferred[abs] = &edit // its own pointer: a retry tells it from a newer one
	return true
}

// kick asks for path's deferred write-back, if any, to be tried again.
func (s *Spool) kick(path string) {
	s.mu.Lock()
	_, ok := s.deferred[path]
	s.mu.Unlock()
	if !ok {
		return
	}
	select {
	case s.retry <- path:
	default: // the periodic retry will get it
	}
}

// dropDeferred forgets path's deferred write-back and its last edit (the
// file is gone for good, or moved).
func (s *Spool) dropDeferred(path string) {
	s.mu.Lock()
	delete(s.deferred, path)
	delete(s.lastEdit, path)
	s.mu.Unlock()
	s.dropLayouts(path)
}

// retryDeferred makes path's deferred write-back, if it is still due. The
// edit is read under the path lock: a write-back that landed meanwhile
// superseded it, and an older status must never be written over it.
func (s *Spool) retryDeferred(path string) {
	l := s.lock(path)
	defer s.unlock(path, l)
	s.mu.Lock()
	d := s.deferred[path]
	if d != nil {
		s.lastEdit[path] = *d
	}
	s.mu.Unlock()
	if d == nil {
		return
	}
	err := s.editFile(path, *d)
	if err == nil {
		s.mu.Lock()
		if s.deferred[path] == d {
			delete(s.deferred, path)
		}
		s.mu.Unlock()
		s.log.Debug().Str("file", filepath.Base(path)).Msg("deferred write-back made")
		return
	}
	if !errors.Is(err, ErrBusy) && !errors.Is(err, ErrConflict) && !errors.Is(err, fs.ErrNotExist) {
		s.mu.Lock()
		if s.deferred[path] == d {
			delete(s.deferred, path)
			s.log.Warn().Err(err).Str("file", filepath.Base(path)).Msg("deferred write-back failed")
		}
		s.mu.Unlock()
	}
}

// retryLoop makes deferred write-backs when kicked, and every period.
func (s *Spool) retryLoop(done <-chan struct{}, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case path := <-s.retry:
			s.retryDeferred(path)
		case <-tick.C:
			s.mu.Lock()
			paths := make([]string, 0, len(s.deferred))
			for p := range s.deferred {
				paths = append(paths, p)
			}
			s.mu.Unlock()
			for _, p := range paths {
				s.retryDeferred(p)
			}
		}
	}
}

func (s *Spool) lock(path string) *pathLock {
	s.mu.Lock()
	l := s.locks[path]
	if l == nil {
		l = &pathLock{}
		s.locks[path] = l
	}
	l.refs++
	s.mu.Unlock()
	l.Lock()
	return l
}

func (s *Spool) unlock(path string, l *pathLock) {
	l.Unlock()
	s.mu.Lock()
	l.refs--
	if l.refs == 0 {
		delete(s.locks, path)
	}
	s.mu.Unlock()
}

// IsManifestName reports whether a directory entry is a manifest: *.yaml
// or *.yml, not a dotfile (which also excludes vim's .x.swp and emacs'
// .#x). Backup files (x~), vim's 4913 probe and everything else have
// another extension.
func IsManifestName(base string) bool {
	if strings.HasPrefix(base, ".") {
		return false
	}
	ext := filepath.Ext(base)
	return (ext == ".yaml" || ext == ".yml") && len(base) > len(ext)
}

// manifestName is the file's base name without its extension.
func manifestName(base string) string {
	return strings.TrimSuffix(base, filepath.Ext(base))
}
