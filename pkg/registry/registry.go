package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Claim is what a running controller declares.
type Claim struct {
	// PID is the controller's process; Acquire fills in this process's
	// when zero.
	PID int `json:"pid"`
	// UID is the controller's user; Acquire sets this process's.
	UID int `json:"uid"`
	// User is the user's name, when known.
	User string `json:"user,omitempty"`
	// Started is when the controller started; Acquire fills in now when zero.
	Started time.Time `json:"started"`
	// Spools are the spools served: absolute, cleaned paths, symlinks
	// resolved where they exist.
	Spools []string `json:"spools"`
	// StateDirs maps a spool to its state directory.
	StateDirs map[string]string `json:"stateDirs,omitempty"`
	// Share says the controller may run beside others that share too.
	Share bool `json:"share,omitempty"`
	// MemoryCapacity is the memory, in bytes, the controller declares it
	// uses at most; required (>0) with Share.
	MemoryCapacity int64 `json:"memoryCapacity,omitempty"`
	// Command is how the controller was started (its argv joined), for
	// messages.
	Command string `json:"command,omitempty"`
}

// ErrShareNeedsCapacity is returned by Acquire for a claim with Share and
// no MemoryCapacity: without one, the claims cannot be fitted together.
var ErrShareNeedsCapacity = errors.New("--share needs a --memory-capacity, so that the controllers sharing the machine can be fitted in its memory")

// BusyError is returned (wrapped or not) by Acquire when another live
// controller keeps this one from starting.
type BusyError struct {
	// Other is the running controller in the way.
	Other Claim
	// Reason says what conflicts and what to do about it.
	Reason string
}

// Error names the other controller (PID, user, spools) and the reason.
func (e *BusyError) Error() string {
	return "a controller already runs on this machine: " + describe(e.Other) + ": " + e.Reason
}

// Held is this process's registered claim, live until Release or the
// process's end. Its descriptor is close-on-exec: a batch the controller
// starts does not keep the claim alive.
type Held struct {
	mu    sync.Mutex // makes Release idempotent and safe from any goroutine
	file  *os.File   // holds the exclusive flock; nil once released
	path  string
	claim Claim
	// Set by Acquire, then only read.
	beside   []Claim  // users' controllers that run beside root's
	memory   int64    // the machine's memory given to Acquire
	readDirs []string // the directories read
}

// Beside returns, for root's controller, the controllers of other users
// that ran when it registered: they never keep it from starting, and each
// stops once it sees root's claim (Displaced). Nil for another user's.
func (h *Held) Beside() []Claim { return slices.Clone(h.beside) }

// Displaced watches the registry, every interval, for a controller of
// root's (the system service) registering while this controller of
// another user runs, and yields root's claim once this one would not be
// admitted beside it (it does not share, or their capacities do not fit):
// the system service serves the machine, and this controller is to stop.
// The channel is closed after that claim, or when ctx ends; for root's
// own controller it yields nothing.
func (h *Held) Displaced(ctx context.Context, interval time.Duration) <-chan Claim {
	out := make(chan Claim, 1)
	mine := h.Claim()
	if mine.UID == 0 {
		go func() { <-ctx.Done(); close(out) }()
		return out
	}
	go func() {
		defer close(out)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			// A directory that cannot be read now is read at the next tick.
			live, _ := scan(h.readDirs, "")
			if c, ok := displacedBy(live, mine, h.memory); ok {
				out <- c
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// Claim returns the claim as registered: with PID, UID, User and Started
// filled in and the paths resolved.
func (h *Held) Claim() Claim {
	c := h.claim
	c.Spools = slices.Clone(c.Spools)
	c.StateDirs = maps.Clone(c.StateDirs)
	return c
}

// Path returns the claim file.
func (h *Held) Path() string { return h.path }

// Release removes the claim file and drops its lock. It is idempotent.
func (h *Held) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.file == nil {
		return nil
	}
	var err error
	// Remove the name only while it is still our file: should someone have
	// removed ours, the name may since belong to another claim.
	if fi, serr := os.Lstat(h.path); serr == nil {
		if mine, ferr := h.file.Stat(); ferr == nil && os.SameFile(fi, mine) {
			if rerr := os.Remove(h.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = fmt.Errorf("remove claim: %w", rerr)
			}
		}
	}
	// Closed after the removal, so that the file never lies there unlocked.
	cerr := h.file.Close()
	h.file = nil
	return errors.Join(err, cerr)
}

// Acquire registers c as this process's claim, or refuses it with a
// *BusyError naming the live controller in the way (ErrShareNeedsCapacity
// for a Share claim without capacity). machineMemory, in bytes, is what
// the capacities of controllers that all Share must fit in together.
//
// Acquire sets UID to this process's, fills PID, User and Started when
// zero, and resolves the paths of Spools and StateDirs. It registers in
// the first usable directory for its user (root: the system's,
// PrimaryDir; EnvDir when set) and checks the claims in all of Dirs. The
// controllers of other users never keep root's from starting: Held.Beside
// names them.
func Acquire(c Claim, machineMemory int64) (*Held, error) {
	want := normalize(c)
	if want.Share && want.MemoryCapacity <= 0 {
		return nil, ErrShareNeedsCapacity
	}
	p, err := firstUsable(registerPlaces(want.UID))
	if err != nil {
		return nil, err
	}
	return acquireIn(p, Dirs(), want, machineMemory)
}

// acquireIn registers want in dir, the claims in readDirs allowing. The
// registry lock of dir is held from the check to the write, so that two
// controllers registering there at once are told of each other. Where the
// lock cannot be had (anyone may open it, so anyone may hold it: a
// waiting room, not a gate), the claim is published, then checked again
// against every other: of two controllers registering at that very moment
// both may refuse, never both start.
func acquireIn(p place, readDirs []string, want Claim, machineMemory int64) (*Held, error) {
	dir := p.dir
	unlock, lockErr := lockRegistry(dir, p.system)
	prune := ""
	if lockErr == nil {
		defer unlock()
		prune = dir
	}
	live, err := scan(readDirs, prune)
	if err != nil {
		return nil, err
	}
	if err := decide(live, want, machineMemory); err != nil {
		return nil, err
	}
	f, path, err := publish(dir, want)
	if err != nil {
		return nil, err
	}
	h := &Held{file: f, path: path, claim: want, beside: beside(live, want), memory: machineMemory, readDirs: readDirs}
	if lockErr == nil {
		return h, nil
	}
	live, err = scan(readDirs, "")
	others := slices.DeleteFunc(live, func(c Claim) bool { return c.PID == want.PID })
	if err == nil {
		err = decide(others, want, machineMemory)
	}
	if err != nil {
		_ = h.Release()
		return nil, err
	}
	return h, nil
}

// Live returns every live claim in every directory of Dirs, by PID. Where
// a directory cannot be read, it returns the claims of the others and an
// error.
func Live() ([]Claim, error) {
	return scan(Dirs(), "")
}

// Serving returns the live claim whose Spools holds spool (resolved as a
// claim's spools are), and false when no live controller serves it. The
// error, where a registry directory could not be read, comes only with
// false.
func Serving(spool string) (Claim, bool, error) {
	live, err := Live()
	want := resolve(spool)
	for _, c := range live {
		if slices.Contains(c.Spools, want) {
			return c, true, nil
		}
	}
	return Claim{}, false, err
}

// Describe names the claim's controller for messages: "pid 1234 (user
// alice) serves /home/alice/spool".
func (c Claim) Describe() string { return describe(c) }

// StateDir is the state directory the claim declares for spool (resolved
// as its spools are); "" when it declares none.
func (c Claim) StateDir(spool string) string { return c.StateDirs[resolve(spool)] }

// normalize fills in what this process knows and resolves the paths, so
// that a spool has one name in every claim and every question.
func normalize(c Claim) Claim {
	if c.PID == 0 {
		c.PID = os.Getpid()
	}
	c.UID = os.Getuid()
	if c.User == "" {
		c.User = userName(c.UID)
	}
	if c.Started.IsZero() {
		c.Started = time.Now()
	}
	spools := make([]string, 0, len(c.Spools))
	for _, s := range c.Spools {
		if p := resolve(s); !slices.Contains(spools, p) {
			spools = append(spools, p)
		}
	}
	c.Spools = spools
	if c.StateDirs != nil {
		dirs := make(map[string]string, len(c.StateDirs))
		for spool, state := range c.StateDirs {
			dirs[resolve(spool)] = resolve(state)
		}
		c.StateDirs = dirs
	}
	return c
}

// resolve makes p absolute and clean, and resolves its symlinks when it
// exists.
func resolve(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

// userName is the name of uid, or "" when the user database lacks it.
func userName(uid int) string {
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return ""
	}
	return u.Username
}

// Update declares the spools the controller serves now (one it found
// later, through a pattern). The claim is rewritten whole: a new file,
// locked and filled, renamed over the old one, so that a reader sees the
// old claim or the new one, never half of one, never one unlocked. Each
// spool is kept from a second controller by its own lock, not by this.
func (h *Held) Update(spools []string, stateDirs map[string]string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.file == nil {
		return errors.New("registry: update of a released claim")
	}
	want := h.claim
	want.Spools, want.StateDirs = spools, stateDirs
	want = normalize(want)
	tmp, err := writeLocked(filepath.Dir(h.path), want)
	if err != nil {
		return fmt.Errorf("update claim: %w", err)
	}
	if err := os.Rename(tmp.Name(), h.path); err != nil {
		_ = os.Remove(tmp.Name())
		_ = tmp.Close()
		return fmt.Errorf("update claim: %w", err)
	}
	_ = h.file.Close() // after the rename: the name is never unlocked
	h.file, h.claim = tmp, want
	return nil
}
