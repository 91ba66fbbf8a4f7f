package v1alpha1

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The bounds of one glob: how many directory entries it may read, and for
// how long. A pattern over a whole file system ("/**/x") or a tree that
// links back into itself stops there, with ErrGlobTooLarge, instead of
// walking for minutes. Variables: a test lowers them.
var (
	globMaxEntries = 2_000_000
	globMaxTime    = 30 * time.Second
)

// ErrGlobTooLarge: items.glob read more directory entries, or ran longer,
// than a glob may.
var ErrGlobTooLarge = errors.New("the glob walks too much")

// globFS is the file system a glob walks: the tree under root, where the
// walk follows a symbolic link to a directory only when the directory is
// inside root, is not an ancestor of the link (a loop), and was not
// entered through another link already (two links that point at each
// other's directories); a link the walk does not follow is a file to it.
// A link named in the pattern itself (before its first wildcard) is
// followed as the user wrote it. So each match is a path the walk reached
// without going round a loop. It reads at most globMaxEntries entries,
// for at most globMaxTime; past that every read fails and exhausted is
// set.
type globFS struct {
	fsys fs.FS
	// base is the directory fsys is rooted at; root the real path of the
	// tree links may lead into.
	base, root string
	deadline   time.Time
	left       int
	exhausted  bool
	// links are the symbolic links the walk found while reading
	// directories (names relative to base); entered the real paths of the
	// directories it entered through one.
	links   map[string]bool
	entered map[fileID]bool
}

// fileID identifies a directory by device and inode.
type fileID struct{ dev, ino uint64 }

func newGlobFS(base string) *globFS {
	root, err := filepath.EvalSymlinks(base)
	if err != nil {
		root = base
	}
	return &globFS{fsys: os.DirFS(base), base: base, root: root, deadline: time.Now().Add(globMaxTime), left: globMaxEntries,
		links: map[string]bool{}, entered: map[fileID]bool{}}
}

// spend takes n entries from the budget; false once it is spent.
func (g *globFS) spend(n int) bool {
	if g.exhausted {
		return false
	}
	g.left -= n
	if g.left < 0 || time.Now().After(g.deadline) {
		g.exhausted = true
	}
	return !g.exhausted
}

// Open opens a file of the tree.
func (g *globFS) Open(name string) (fs.File, error) {
	if !g.spend(1) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrGlobTooLarge}
	}
	return g.fsys.Open(name)
}

// ReadDir reads a directory, noting the links in it.
func (g *globFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !g.spend(1) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: ErrGlobTooLarge}
	}
	entries, err := fs.ReadDir(g.fsys, name)
	if !g.spend(len(entries)) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: ErrGlobTooLarge}
	}
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 {
			g.links[path.Join(name, e.Name())] = true
		}
	}
	return entries, err
}

// Stat says what name is: through a link found by the walk, the
// directory it leads to only where the walk may follow it (see globFS).
func (g *globFS) Stat(name string) (fs.FileInfo, error) {
	if !g.spend(1) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: ErrGlobTooLarge}
	}
	if !g.links[name] {
		return fs.Stat(g.fsys, name)
	}
	full := filepath.Join(g.base, filepath.FromSlash(name))
	link, err := os.Lstat(full)
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(full)
	if err != nil || !info.IsDir() {
		return link, nil // dangling, or a link to a file: a file either way
	}
	target, err := filepath.EvalSymlinks(full)
	if err != nil || !within(target, g.root) {
		return link, nil
	}
	if g.ancestor(name, target) {
		return link, nil // a loop
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return link, nil
	}
	id := fileID{dev: uint64(st.Dev), ino: st.Ino}
	if g.entered[id] {
		return link, nil
	}
	g.entered[id] = true
	return info, nil
}

// ancestor reports whether the directory target is, or holds, one of the
// directories the walk went through to reach the link name: following it
// would walk round in a loop.
func (g *globFS) ancestor(name, target string) bool {
	dir := path.Dir(name)
	for {
		real, err := filepath.EvalSymlinks(filepath.Join(g.base, filepath.FromSlash(dir)))
		if err != nil || within(real, target) {
			return true
		}
		if dir == "." || dir == "/" {
			return false
		}
		dir = path.Dir(dir)
	}
}

// within reports whether p is dir or below it (both real, clean paths).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// tooLarge is the error of a glob that ran out of its bounds.
func tooLarge() error {
	return fmt.Errorf("%w: it read more than %d directory entries or ran for more than %v; narrow the pattern (a symbolic link to a directory is followed only inside the working directory, once)", ErrGlobTooLarge, globMaxEntries, globMaxTime)
}
