package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// ErrSharedSpool reports a spool directory writable by group or others.
var ErrSharedSpool = errors.New("spool directory is writable by group or others")

// ErrOutsideSpool reports a path that is not a manifest of this spool.
var ErrOutsideSpool = errors.New("path is not in the spool directory")

// Defaults of Options.
const (
	DefaultRelist = 10 * time.Second
	DefaultSettle = 300 * time.Millisecond
)

// Options tune a Spool; zero fields take the defaults.
type Options struct {
	// AllowShared accepts a spool directory writable by group or others
	// (the --allow-shared-spool flag).
	AllowShared bool
	// Relist is the period of the full directory listing (default 10 s).
	Relist time.Duration
	// Settle is how long an unparseable file must stay unchanged before it
	// is declared Invalid (default 300 ms).
	Settle time.Duration
	// MaxFileSize is the largest manifest read (default 1 MiB).
	MaxFileSize int64
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
	// Deleted: the file is gone (or is now ignored). Only Path and Name are set.
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
	opts   Options
	log    zerolog.Logger
	events chan Event
	euid   int

	// mu guards locks, the per-path write-back locks. Lock order: mu, then
	// a path lock is taken only after mu is released (never both held).
	mu    sync.Mutex
	locks map[string]*pathLock
}

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
	log := opts.Logger
	return &Spool{
		dir:    abs,
		opts:   opts,
		log:    log.With().Str("spool", abs).Logger(),
		events: make(chan Event, 256),
		euid:   os.Geteuid(),
		locks:  map[string]*pathLock{},
	}, nil
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
func (s *Spool) WriteStatus(path string, status *v1alpha1.TaskStatus) error {
	return s.edit(path, func(b []byte) ([]byte, error) { return ReplaceStatus(b, status) })
}

// SetPaused sets spec.paused in the manifest at path (see SetSpecPaused),
// with the same guarantees as WriteStatus.
func (s *Spool) SetPaused(path string, paused bool) error {
	return s.edit(path, func(b []byte) ([]byte, error) { return SetSpecPaused(b, paused) })
}

func (s *Spool) edit(path string, edit func([]byte) ([]byte, error)) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("edit %s: %w", path, err)
	}
	if filepath.Dir(abs) != s.dir || !IsManifestName(filepath.Base(abs)) {
		return fmt.Errorf("edit %s: %w %s", path, ErrOutsideSpool, s.dir)
	}
	l := s.lock(abs)
	defer s.unlock(abs, l)
	if err := editFile(abs, s.opts.MaxFileSize, edit, nil); err != nil {
		return fmt.Errorf("write-back: %w", err)
	}
	return nil
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
