package scratch

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"github.com/rs/zerolog"
)

// NamePrefix starts the base name of every lease directory, whoever made it
// (it is governor.DefaultLeasePrefix).
const NamePrefix = "lardon3d-lease-"

// ErrNotALease is returned for a path whose base name is not a lease's.
var ErrNotALease = errors.New("not a scratch lease directory")

// Leases creates and removes the directories of scratch leases. See the
// package documentation.
type Leases struct {
	owner, token string
	volumes      []string
	leftover     *regexp.Regexp
	log          zerolog.Logger

	// wake tells Run that paths wait; buffered(1), sends never block.
	wake chan struct{}

	mu struct {
		sync.Mutex
		pending []string
		// stopped is set once Run returned: Release then removes at once.
		stopped bool
		// made are the lease directories Create made and Release has not
		// handed back: a batch retried under its lease finds its own.
		made map[string]bool
	}
}

// New returns the Leases of a controller. owner is its stable identity (the
// absolute spool directory); volumes are the scratch directories leases are
// made on, searched for leftovers by RemoveLeftovers.
func New(owner string, volumes []string, log zerolog.Logger) *Leases {
	sum := sha256.Sum256([]byte(owner))
	var tok [8]byte
	_, _ = rand.Read(tok[:]) // never fails (crypto/rand, Go 1.24)
	l := &Leases{
		owner:   hex.EncodeToString(sum[:4]),
		token:   hex.EncodeToString(tok[:]),
		volumes: append([]string(nil), volumes...),
		log:     log,
		wake:    make(chan struct{}, 1),
	}
	l.leftover = regexp.MustCompile(`^` + regexp.QuoteMeta(NamePrefix+l.owner+"-") + `([0-9a-f]{16})-[0-9]+(-[0-9a-f]{16})?$`)
	return l
}

// Prefix is the lease name prefix to give the governor
// (governor.WithLeasePrefix): lardon3d-lease-OWNER-TOKEN-.
func (l *Leases) Prefix() string { return NamePrefix + l.owner + "-" + l.token + "-" }

// isLease says whether dir's base name is a lease directory's name.
func isLease(dir string) bool {
	base := filepath.Base(dir)
	return strings.HasPrefix(base, NamePrefix) && len(base) > len(NamePrefix) && !strings.ContainsRune(base, os.PathSeparator)
}

// Create makes the directory of a lease (mode 0700) on its volume, a
// directory that must not exist before (mkdir fails on one that does, as
// O_EXCL would): only the directory this Leases made for the lease, for an
// earlier attempt of its batch, is taken again. One made in advance by
// anyone else (on a volume others may write to, to have it handed to
// another user's batch) is refused, as is what mkdir made if it is not a
// 0700 directory of the controller's user. The volume itself must exist:
// a volume gone is an error, not a directory tree made anew.
func (l *Leases) Create(dir string) error {
	if !isLease(dir) {
		return fmt.Errorf("create %s: %w", dir, ErrNotALease)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.made[dir] {
		// Handed to the batch's user, maybe (its owner is theirs now):
		// still a directory, not a link put in its place.
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("create scratch lease directory: %s is no longer the directory made for its lease; refused", dir)
		}
		return nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create scratch lease directory: %s exists before its lease: someone made it in advance; refused", dir)
		}
		return fmt.Errorf("create scratch lease directory: %w", err)
	}
	if err := checkMine(dir); err != nil {
		return err
	}
	if l.mu.made == nil {
		l.mu.made = make(map[string]bool)
	}
	l.mu.made[dir] = true
	return nil
}

// checkMine checks that dir is a directory (not a link) of the
// controller's user, mode 0700.
func checkMine(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("create scratch lease directory: %w", err)
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	if !fi.IsDir() || uid != os.Geteuid() || fi.Mode().Perm() != 0o700 {
		return fmt.Errorf("create scratch lease directory: %s is not a 0700 directory of the controller's user (%s, uid %d); refused", dir, fi.Mode(), uid)
	}
	return nil
}

// Release hands the directory of a released lease to Run for removal; it
// never blocks and never touches a file while Run is running.
func (l *Leases) Release(dir string) {
	if dir == "" {
		return
	}
	l.mu.Lock()
	delete(l.mu.made, dir)
	if l.mu.stopped {
		l.mu.Unlock()
		l.remove(dir)
		return
	}
	l.mu.pending = append(l.mu.pending, dir)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run removes released lease directories until ctx ends, then removes
// those still waiting and returns; later Releases remove at once.
func (l *Leases) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			l.mu.Lock()
			l.mu.stopped = true
			l.mu.Unlock()
			l.drain()
			return
		case <-l.wake:
			l.drain()
		}
	}
}

// drain removes every directory waiting.
func (l *Leases) drain() {
	l.mu.Lock()
	dirs := l.mu.pending
	l.mu.pending = nil
	l.mu.Unlock()
	for _, d := range dirs {
		l.remove(d)
	}
}

func (l *Leases) remove(dir string) {
	if !isLease(dir) {
		l.log.Error().Str("dir", dir).Msg("refusing to remove a directory that is not a scratch lease")
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		l.log.Warn().Str("dir", dir).Err(err).Msg("scratch lease directory not removed")
	}
}

// RemoveLeftovers removes, in every volume, the lease directories a previous
// controller of the same owner left (any token but this one's), and returns
// how many it removed. A volume that cannot be listed is skipped, with its
// error joined to the result.
func (l *Leases) RemoveLeftovers() (int, error) {
	removed := 0
	var errs []error
	for _, vol := range l.volumes {
		ents, err := os.ReadDir(vol)
		if err != nil {
			errs = append(errs, fmt.Errorf("scratch volume %s: %w", vol, err))
			continue
		}
		for _, e := range ents {
			m := l.leftover.FindStringSubmatch(e.Name())
			if m == nil || m[1] == l.token {
				continue
			}
			p := filepath.Join(vol, e.Name())
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, fmt.Errorf("leftover scratch lease %s: %w", p, err))
				continue
			}
			removed++
		}
	}
	return removed, errors.Join(errs...)
}
