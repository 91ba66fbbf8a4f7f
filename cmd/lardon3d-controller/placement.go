package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// Where a controller keeps what is not in a spool's manifests. One rule,
// the same for run and for the verbs that read what it left:
//
//   - a spool's state (logs, items files, listing socket, published views) is in
//     SPOOL/.lardon3d, unless the machine's state base holds a directory
//     for it: a root controller serving another user's spool keeps that
//     spool's state out of the user's reach (a user who owns the spool
//     could otherwise swap SPOOL/.lardon3d for a link, and root would
//     write where the link points), in STATE_BASE/spools/HASH-NAME,
//     readable by the spool's owner's group;
//   - the learned history is the machine's: one store for every spool a
//     controller serves, STATE_BASE/history.db.
//
// STATE_BASE is $STATE_DIRECTORY (systemd's StateDirectory=), else
// $XDG_STATE_HOME/lardon3d, else /var/lib/lardon3d for root and
// ~/.local/state/lardon3d for a user.

// stateBase is the machine's state directory for this user.
func stateBase() string {
	if d := os.Getenv("STATE_DIRECTORY"); d != "" {
		// systemd may list several, separated by colons: the first.
		return strings.SplitN(d, ":", 2)[0]
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "lardon3d")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/lardon3d"
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "lardon3d")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("lardon3d-%d", os.Geteuid()))
}

// defaultHistoryPath is the machine's learned history.
func defaultHistoryPath() string { return filepath.Join(stateBase(), history.FileName) }

// historyReadFlag adds --history to a verb that reads the learned
// history, for a controller run with a history of its own (run
// --history, or its config's history); *path is "" for the machine's.
func historyReadFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "history", "", "the learned history's store to read, as given to run --history (default: the machine's, "+defaultHistoryPath()+")")
}

// historyToRead is the store a reading verb opens: path, which must
// exist when given (a mistyped one would read as an empty history), else
// the machine's.
func historyToRead(path string) (string, error) {
	if path == "" {
		return defaultHistoryPath(), nil
	}
	if _, err := os.Stat(path); err != nil {
		return "", &exitError{code: exitUsage, err: fmt.Errorf("--history: %w", err)}
	}
	return path, nil
}

// rootStateBase is where a root controller keeps the state of other users'
// spools; the verbs of those users look there too.
const rootStateBase = "/var/lib/lardon3d"

// foreignStateDir is the state directory a root controller keeps for a
// spool that another user owns.
func foreignStateDir(base, spoolAbs string) string {
	sum := sha256.Sum256([]byte(spoolAbs))
	return filepath.Join(base, "spools", fmt.Sprintf("%x-%s", sum[:6], filepath.Base(spoolAbs)))
}

// stateDirName is the name of a spool's own state directory.
const stateDirName = reconcile.StateDirName

// ownStateDir is the spool's own state directory, SPOOL/.lardon3d.
func ownStateDir(spool string) string { return filepath.Join(spool, stateDirName) }

// resolveStateDir is the state directory the verbs read for spool, resolved
// once for every verb: flag (--state-dir) when given; else the one the
// controller serving the spool declared in the machine's registry (a
// controller of this user's, or root's: another user's could point
// anywhere), so that a controller started with --state-dir is found
// without it; else where run places it (spoolStateDir).
func resolveStateDir(spool, flag string) string {
	if flag != "" {
		return flag
	}
	if c, ok, _ := registry.Serving(spool); ok && (c.UID == os.Geteuid() || c.UID == 0) {
		if d := c.StateDir(spool); d != "" {
			return d
		}
	}
	return spoolStateDir(spool)
}

// spoolStateDir is the state directory of a spool, as run chooses it when
// --state-dir is not given: the root controller's directory for it when
// one exists (see above), else SPOOL/.lardon3d.
func spoolStateDir(spool string) string {
	abs, err := filepath.Abs(spool)
	if err != nil {
		return ownStateDir(spool)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	for _, base := range []string{stateBase(), rootStateBase} {
		d := foreignStateDir(base, abs)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return ownStateDir(spool)
}

// expandedSpool is a spool directory an entry named.
type expandedSpool struct {
	// dir is absolute, symlinks resolved.
	dir string
	// byPattern: a pattern matched it (a user may have made it): it is
	// skipped, not fatal, when it cannot be served.
	byPattern bool
}

// expandSpools resolves the spools a controller serves: each entry a
// directory, or a pattern (doublestar: *, **, {a,b}) of directories, such
// as /home/*/lardon3d/spool for a spool per user under a root the
// administrator chose. Entries are made absolute with symlinks resolved,
// and each appears once. A plain entry that does not exist is an error; a
// pattern may match nothing (yet). A match reached through a symbolic
// link below the pattern's fixed part is skipped (in skipped, with why):
// a user who owns a matched path could otherwise point it at any
// directory, root's included.
func expandSpools(entries []string) (out []expandedSpool, skipped []error, err error) {
	seen := map[string]bool{}
	add := func(p string, byPattern bool) error {
		abs, err := filepath.Abs(p)
		if err != nil {
			return err
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return fmt.Errorf("spool %s: %w", p, err)
		}
		if st, err := os.Stat(real); err != nil {
			return fmt.Errorf("spool %s: %w", p, err)
		} else if !st.IsDir() {
			return fmt.Errorf("spool %s: not a directory", p)
		}
		if !seen[real] {
			seen[real] = true
			out = append(out, expandedSpool{dir: real, byPattern: byPattern})
		}
		return nil
	}
	for _, e := range entries {
		if e == "" {
			return nil, nil, fmt.Errorf("an empty spool path")
		}
		if !hasMeta(e) {
			if err := add(e, false); err != nil {
				return nil, nil, err
			}
			continue
		}
		abs, err := filepath.Abs(e)
		if err != nil {
			return nil, nil, err
		}
		matches, err := doublestar.FilepathGlob(abs)
		if err != nil {
			return nil, nil, fmt.Errorf("spool pattern %q: %w", e, err)
		}
		fixed := fixedPart(abs)
		fixedReal, err := filepath.EvalSymlinks(fixed)
		if err != nil {
			continue // nothing there yet
		}
		for _, m := range matches {
			if st, err := os.Stat(m); err != nil || !st.IsDir() {
				continue
			}
			rel, err := filepath.Rel(fixed, m)
			real, rerr := filepath.EvalSymlinks(m)
			if err != nil || rerr != nil || real != filepath.Join(fixedReal, rel) {
				skipped = append(skipped, fmt.Errorf("spool %s (matched by %s): reached through a symbolic link; a pattern serves real directories only", m, e))
				continue
			}
			if err := add(m, true); err != nil {
				skipped = append(skipped, err)
			}
		}
	}
	return out, skipped, nil
}

// fixedPart is the directory of a pattern before its first metacharacter.
func fixedPart(pattern string) string {
	i := strings.IndexAny(pattern, "*?[{")
	return filepath.Dir(pattern[:i+1])
}

// hasMeta reports whether a spool entry is a pattern.
func hasMeta(p string) bool { return strings.ContainsAny(p, "*?[{") }

// placedSpool is a spool run serves and its state directory.
type placedSpool struct {
	dir, stateDir string
}

// runStateDir is the state directory run keeps for a spool: SPOOL/.lardon3d
// when the controller's user owns the spool and nobody else can write it
// (or it is sticky); else STATE_BASE/spools/HASH-NAME, made here: for a
// controller running as root, owned by root, its group the spool's
// (setgid, mode 2750: the owner's verbs read the logs and views there,
// nobody but root writes); for another user, 0700 (userStateDir).
func runStateDir(dir string) (string, error) {
	own := ownStateDir(dir)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", fmt.Errorf("spool %s: %w", dir, err)
	}
	if int64(st.Uid) == int64(os.Geteuid()) && (st.Mode&0o022 == 0 || st.Mode&unix.S_ISVTX != 0) {
		// Nobody else can rename SPOOL/.lardon3d away or put another in
		// its place (a sticky spool included: there, one made by someone
		// else first is refused at start, not its owner's).
		return own, nil
	}
	if os.Geteuid() != 0 {
		// A spool others can write (--allow-shared-spool): they could swap
		// SPOOL/.lardon3d for a directory of links to this user's files.
		return userStateDir(dir)
	}
	base := stateBase()
	if err := os.MkdirAll(filepath.Join(base, "spools"), 0o755); err != nil {
		return "", fmt.Errorf("state directory of %s: %w", dir, err)
	}
	// The users whose spools are served reach their state directories
	// through these two: searchable by all (the history made the base
	// 0700 where it came first), each spool's own directory says who reads.
	for _, d := range []string{base, filepath.Join(base, "spools")} {
		if err := searchable(d); err != nil {
			return "", fmt.Errorf("state directory of %s: %w", dir, err)
		}
	}
	for d := filepath.Dir(base); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil || st.Mode&0o001 == 0 {
			return "", fmt.Errorf("state directory of %s: %s, above the machine's state directory %s, is not searchable by other users, whose tasks must reach their items there: choose another (STATE_DIRECTORY, or no XDG_STATE_HOME for /var/lib/lardon3d)", dir, d, base)
		}
		if d == "/" {
			break
		}
	}
	sd := foreignStateDir(base, dir)
	if err := os.Mkdir(sd, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("state directory of %s: %w", dir, err)
	}
	var sst unix.Stat_t
	if err := unix.Lstat(sd, &sst); err != nil {
		return "", fmt.Errorf("state directory of %s: %w", dir, err)
	}
	if sst.Mode&unix.S_IFMT != unix.S_IFDIR || sst.Uid != 0 {
		return "", fmt.Errorf("state directory of %s: %s is not a directory owned by root", dir, sd)
	}
	if err := os.Chown(sd, 0, int(st.Gid)); err != nil {
		return "", fmt.Errorf("state directory of %s: %w", dir, err)
	}
	if err := os.Chmod(sd, 0o750|os.ModeSetgid); err != nil {
		return "", fmt.Errorf("state directory of %s: %w", dir, err)
	}
	return sd, nil
}

// userStateDir is the state directory a controller that is not root keeps
// for a spool it does not own alone: STATE_BASE/spools/HASH-NAME, 0700.
func userStateDir(dir string) (string, error) {
	sd := foreignStateDir(stateBase(), dir)
	if err := os.MkdirAll(filepath.Dir(sd), 0o700); err != nil {
		return "", fmt.Errorf("state directory of %s: %w", dir, err)
	}
	if err := os.Mkdir(sd, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("state directory of %s: %w", dir, err)
	}
	return sd, nil
}

// searchable adds search permission for all to root's directory d (no
// read, no write): a path through it, never its listing.
func searchable(d string) error {
	var st unix.Stat_t
	if err := unix.Lstat(d, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 {
		return fmt.Errorf("%s is not a directory owned by root", d)
	}
	if st.Mode&0o011 == 0o011 {
		return nil
	}
	return os.Chmod(d, os.FileMode(st.Mode&0o777|0o011))
}

// claimMachine registers this controller in the machine's registry: it is
// refused, naming the one that runs, unless both say share (bc.Share) and
// their memory capacities fit in the machine's memory together.
func claimMachine(bc budgetConfig, placed []placedSpool, snapshot reconcile.SnapshotFunc) (*registry.Held, error) {
	snap, err := snapshot()
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	machine := snap.MemTotal
	if snap.CgroupMemoryLimit > 0 && snap.CgroupMemoryLimit < machine {
		machine = snap.CgroupMemoryLimit
	}
	c := registry.Claim{Share: bc.Share, Command: strings.Join(os.Args, " "), StateDirs: map[string]string{}}
	for _, p := range placed {
		c.Spools = append(c.Spools, p.dir)
		c.StateDirs[p.dir] = p.stateDir
	}
	if bc.MemoryCapacity != nil {
		c.MemoryCapacity = bc.MemoryCapacity.Value()
	}
	held, err := registry.Acquire(c, machine)
	if errors.Is(err, registry.ErrShareNeedsCapacity) {
		return nil, fmt.Errorf("--share: %w", err)
	}
	return held, err
}

// spoolController is what describe says of the controller of a spool.
type spoolController struct {
	// line says which controller serves the spool, that none does and how
	// to start one, or why it cannot be told.
	line string
	// none: no controller serves the spool (as get's warning says).
	none bool
	// share is the spool's account's fair share as the controller
	// published it (shareLine); "" when not known.
	share string
}

// servingLine says which controller serves spool, or that none does and
// how to start one: what the machine's registry says, as get's warning.
func servingLine(dir string) spoolController {
	c, ok, err := registry.Serving(dir)
	switch {
	case ok:
		who := c.User
		if who == "" {
			who = fmt.Sprintf("uid %d", c.UID)
		}
		return spoolController{line: fmt.Sprintf("pid %d (user %s) since %s, serving %d spool(s)", c.PID, who, c.Started.Format(time.RFC3339), len(c.Spools))}
	case err != nil:
		return spoolController{line: "cannot tell: " + err.Error()}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	if pid := spool.Holder(abs); pid > 0 {
		return spoolController{line: fmt.Sprintf("pid %d is starting on this spool: not serving it yet", pid)}
	}
	return spoolController{none: true, line: fmt.Sprintf("none is running for this spool: the task starts once one serves it (`lardon3d-controller run --spool %s`, or the spool added to the running one's spools, see README)", abs)}
}

// noController says that no controller serves spool, and how to start
// one; or, when a controller holds the spool's lock but is not serving it
// yet (it locks the spool, then registers, then answers), that it is
// starting.
func noController(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	if pid := spool.Holder(abs); pid > 0 {
		return fmt.Sprintf("the controller on %s (pid %d) is starting: the tasks are listed from their files until it serves them", abs, pid)
	}
	return fmt.Sprintf("no controller is running on %s: start one with `lardon3d-controller run --spool %s` (or add the spool to the running one's spools, see README)", abs, abs)
}
