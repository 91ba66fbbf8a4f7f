package cgroup

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
)

// RecycleResidue is the most a group may still be charged, once its
// processes have ended, to be kept for reuse: the kernel memory a short
// command leaves (150–650 KiB after `true`, measured on v1), not the page
// cache of a batch that read files. A reused group's Peak counts it.
const RecycleResidue = 1 << 20

// maxSpares bounds the groups a tree keeps for reuse: about the batches
// that run at once.
const maxSpares = 32

// spare is a group Recycle kept: its directories, under its last name,
// and the limits it has.
type spare struct {
	dirs   map[string]string
	limits Limits
}

// Recycle hands the group, whose processes have all ended, back to its
// tree, where the next New renames and reuses it instead of creating a
// group and having this one removed: two renames instead of two mkdirs and
// two rmdirs, which are a tenth of the controller's work on short batches.
// The group is kept only when it is as good as a new one: cgroup v1 (the
// kernel renames only v1 groups; a name must keep saying whose batch runs
// there), made by this tree, no process listed, never frozen (a freeze
// racing the batch's end cannot reach a later batch), no OOM kill counted
// (the count cannot be reset), and at most RecycleResidue bytes charged;
// New then resets its peak. Otherwise, or when the tree keeps enough
// groups, it is removed as by Remove. Either way the Group must not be
// used after: its directories are renamed away or gone.
func (g *Group) Recycle() error {
	if !g.reusable() || !g.tree.keep(g) {
		return g.Remove()
	}
	return nil
}

// reusable reports whether the group may be reused (see Recycle).
func (g *Group) reusable() bool {
	if g.ref.Version != 1 || g.tree == nil || g.froze.Load() || g.sealed.Load() || len(g.ref.Dirs) != len(g.tree.dirs) {
		return false
	}
	d := g.mainDir()
	if pids, err := g.Procs(); err != nil || len(pids) > 0 {
		return false
	}
	if usage, err := readInt(filepath.Join(d, "memory.usage_in_bytes")); err != nil || usage > RecycleResidue {
		return false
	}
	oom, err := readKeyed(filepath.Join(d, "memory.oom_control"))
	return err == nil && oom["oom_kill"] == 0
}

// keep adds g to the tree's spares; false when it keeps enough or is
// removed.
func (t *Tree) keep(g *Group) bool {
	t.spares.Lock()
	defer t.spares.Unlock()
	if t.spares.closed || len(t.spares.groups) >= maxSpares {
		return false
	}
	t.spares.groups = append(t.spares.groups, spare{dirs: g.ref.Dirs, limits: g.limits})
	return true
}

// reuse renames a kept group to name, resets its peak and sets its limits;
// nil when no group is kept or this one fails (it is then removed).
func (t *Tree) reuse(name string, l Limits) *Group {
	t.spares.Lock()
	n := len(t.spares.groups)
	if n == 0 {
		t.spares.Unlock()
		return nil
	}
	s := t.spares.groups[n-1]
	t.spares.groups = t.spares.groups[:n-1]
	t.spares.Unlock()
	// A new map: the Ref of the batch that had the group names the old
	// directories, which are gone once renamed.
	g := &Group{ref: Ref{Version: t.version, Dirs: maps.Clone(s.dirs)}, fd: -1, tree: t, fs: t.fs, limits: s.limits}
	ok := true
	for c, d := range s.dirs {
		to := filepath.Join(filepath.Dir(d), name)
		if err := os.Rename(d, to); err != nil {
			ok = false
			break
		}
		g.ref.Dirs[c] = to
	}
	ok = ok && writeFile(filepath.Join(g.mainDir(), "memory.max_usage_in_bytes"), "0") == nil && g.setLimits(l) == nil
	if !ok {
		_ = g.Remove()
		return nil
	}
	return g
}

// removeSpares removes the kept groups; none is kept after.
func (t *Tree) removeSpares() error {
	t.spares.Lock()
	groups := t.spares.groups
	t.spares.groups, t.spares.closed = nil, true
	t.spares.Unlock()
	var errs []error
	for _, s := range groups {
		g := &Group{ref: Ref{Version: t.version, Dirs: s.dirs}, fd: -1}
		errs = append(errs, g.Remove())
	}
	return errors.Join(errs...)
}
