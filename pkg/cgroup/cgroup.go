package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/kernfile"
)

// Controller names used in a Ref's Dirs. On v2 the single directory is
// under Unified. No group is made in cpuacct any more; a Ref recorded by
// an earlier version may name one, and it is killed and removed with the
// rest.
const (
	Memory  = "memory"
	Freezer = "freezer"
	Pids    = "pids"
	CPUAcct = "cpuacct"
	Unified = "unified"
)

// v1Controllers are the v1 hierarchies a group joins, memory first (it is
// required; freezer and pids are used where they are mounted). Not cpuacct: its reading
// was one more mkdir, move, read and rmdir per batch (5 % of the time of
// a run of short tasks), for what the leader's rusage gives the runner.
var v1Controllers = []string{Memory, Freezer, Pids}

// controllerLeaf is the v2 leaf the controller moves itself into when its
// own cgroup must hand controllers down to the subtree.
const controllerLeaf = "lardon3d-controller"

// Errors returned by this package.
var (
	// ErrUnavailable: no memory controller can be used (none mounted, or
	// the parent cannot be written or does not offer memory).
	ErrUnavailable = errors.New("no usable memory cgroup")
	// ErrFreezeTimeout: the group did not reach the frozen state in time.
	ErrFreezeTimeout = errors.New("cgroup did not freeze in time")
	// ErrNotEmpty: processes of the group survived SIGKILL past the wait.
	ErrNotEmpty = errors.New("cgroup still has live processes")
)

// Options say where to find the hierarchies and where to build the subtree.
type Options struct {
	// ProcRoot is the proc file system ("" for /proc).
	ProcRoot string
	// PID is the process whose mounts and cgroups are read (0 for this
	// process).
	PID int
	// Parent is a cgroup path, as in /proc/PID/cgroup ("/batch.slice"),
	// under which the subtree is created; "" for the controller's own
	// cgroup.
	Parent string
	// Name is the subtree's directory name: one path element. On a
	// systemd machine where the controller's own cgroup is not its to
	// divide, Name.scope is the transient scope asked for.
	Name string
	// NoSystemd: never ask systemd, even where it runs (tests of the
	// plain path).
	NoSystemd bool
}

// Tree is the controller's subtree: one directory per hierarchy, under
// which every batch group is created. It is immutable after Open, but for
// what is looked up once (the way back EnterThread opens, the limit files
// the kernel offers) and the groups kept for reuse.
type Tree struct {
	version int
	// setup says, for a person, which cgroup the subtree is in and why.
	setup string
	// dirs maps a controller (Memory, Freezer, CPUAcct; or Unified) to the
	// subtree's directory in that hierarchy.
	dirs map[string]string
	// mounts maps a v1 controller to its hierarchy's mount, to find where
	// a thread is (EnterThread).
	mounts map[string]*procfs.MountInfo
	fs     procfs.FS
	// has tells which optional limit files the kernel offers, a property
	// of the hierarchy, the same in every group: v1
	// memory.memsw.limit_in_bytes (swap accounting), v2 memory.swap.max
	// and memory.oom.group. Looked for in the first group made.
	has struct {
		once  sync.Once
		files map[string]bool
	}
	// homes maps a v1 controller to the tasks file of the cgroup, in its
	// hierarchy, of the process the tree was opened for: where
	// EnterThread's threads go back. Opened once, at the first
	// EnterThread, and kept open.
	homes struct {
		once  sync.Once
		paths map[string]string
		files map[string]*os.File
		err   error
	}
	// spares are the empty groups Recycle kept for New to rename and reuse
	// (v1), the last kept first.
	spares struct {
		sync.Mutex
		groups []spare
		closed bool // Remove ran: nothing is kept any more
	}
}

// Ref names a group on disk, to be recorded so that a restarted controller
// can find and kill what a crashed one left (Load).
type Ref struct {
	// Version is 1 or 2.
	Version int `json:"version"`
	// Dirs maps a controller to the group's directory in its hierarchy.
	Dirs map[string]string `json:"dirs"`
}

// Main returns the group's directory in the memory (v1) or unified (v2)
// hierarchy.
func (r Ref) Main() string {
	if r.Version == 1 {
		return r.Dirs[Memory]
	}
	return r.Dirs[Unified]
}

// LoadDir returns the group whose memory (v1) or unified (v2) directory is
// dir, for reading: its memory and its processes. The version is the file
// system's.
func LoadDir(dir string) (*Group, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	switch st.Type {
	case unix.CGROUP_SUPER_MAGIC:
		return Load(Ref{Version: 1, Dirs: map[string]string{Memory: dir}})
	case unix.CGROUP2_SUPER_MAGIC:
		return Load(Ref{Version: 2, Dirs: map[string]string{Unified: dir}})
	}
	return nil, fmt.Errorf("cgroup %s: not on a cgroup file system", dir)
}

// Limits are what the kernel enforces on a group. Zero means no limit.
type Limits struct {
	// MemoryMax is the hard limit in bytes: past it the kernel reclaims,
	// then kills.
	MemoryMax int64
	// MemorySoft is where the group is reclaimed first under machine-wide
	// pressure (v1 soft limit; ignored on v2).
	MemorySoft int64
	// PidsMax bounds the group's tasks (processes and threads: pids.max),
	// 0 for no bound; where no pids controller is offered, nothing.
	PidsMax int64
	// Fresh asks for a new group, not one Recycle kept (whose usage starts
	// with up to RecycleResidue): for a caller that holds the usage to a
	// bound of its own, below MemoryMax.
	Fresh bool
}

// Open discovers the hierarchies and creates (or reuses) the subtree. It
// returns ErrUnavailable, wrapped with the reason, when no memory cgroup
// can be used.
func Open(o Options) (*Tree, error) {
	if o.Name == "" || strings.ContainsAny(o.Name, "/\x00") || o.Name == "." || o.Name == ".." {
		return nil, fmt.Errorf("cgroup subtree name %q: want one path element", o.Name)
	}
	if o.ProcRoot == "" {
		o.ProcRoot = procfs.DefaultMountPoint
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	fs, err := procfs.NewFS(o.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	mounts, err := fs.GetProcMounts(o.PID)
	if err != nil {
		return nil, fmt.Errorf("%w: read mounts: %v", ErrUnavailable, err)
	}
	p, err := fs.Proc(o.PID)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	own, err := p.Cgroups()
	if err != nil {
		return nil, fmt.Errorf("%w: read own cgroups: %v", ErrUnavailable, err)
	}
	var t *Tree
	if m := v1Mount(mounts, Memory); m != nil {
		t, err = openV1(o, mounts, own)
	} else {
		t, err = openV2(o, mounts, own)
	}
	if err != nil {
		return nil, err
	}
	t.fs = fs
	return t, nil
}

// v1Mount returns the v1 hierarchy carrying controller, nil when none.
func v1Mount(mounts []*procfs.MountInfo, controller string) *procfs.MountInfo {
	for _, m := range mounts {
		if m.FSType != "cgroup" {
			continue
		}
		if _, ok := m.SuperOptions[controller]; ok {
			return m
		}
	}
	return nil
}

// hierarchyDir maps a cgroup path of a hierarchy (as /proc/PID/cgroup shows
// it) onto the directory under the hierarchy's mount point. A mount showing
// only a sub-tree (a cgroup namespace, a bind mount) is taken into account.
func hierarchyDir(m *procfs.MountInfo, cgPath string) string {
	rel := filepath.Clean("/" + cgPath)
	if root := filepath.Clean("/" + m.Root); root != "/" {
		if r, ok := strings.CutPrefix(rel, root); ok && (r == "" || r[0] == '/') {
			rel = "/" + strings.TrimPrefix(r, "/")
		}
	}
	return filepath.Join(m.MountPoint, rel)
}

// ownPath returns the process's cgroup path in the hierarchy of controller
// (v1), or in the unified hierarchy when controller is "".
func ownPath(own []procfs.Cgroup, controller string) (string, bool) {
	for _, c := range own {
		if controller == "" && c.HierarchyID == 0 && len(c.Controllers) == 0 {
			return c.Path, true
		}
		if controller != "" && slices.Contains(c.Controllers, controller) {
			return c.Path, true
		}
	}
	return "", false
}

func openV1(o Options, mounts []*procfs.MountInfo, own []procfs.Cgroup) (*Tree, error) {
	t := &Tree{version: 1, dirs: map[string]string{}, mounts: map[string]*procfs.MountInfo{}}
	t.homes.paths = map[string]string{}
	for _, c := range v1Controllers {
		m := v1Mount(mounts, c)
		if m == nil {
			continue
		}
		t.mounts[c] = m
		home, ok := ownPath(own, c)
		if !ok {
			home = "/"
		}
		t.homes.paths[c] = filepath.Join(hierarchyDir(m, home), "tasks")
		parent := o.Parent
		if parent == "" {
			parent = home
		}
		dir := filepath.Join(hierarchyDir(m, parent), o.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			if c == Memory {
				return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
			}
			continue // freezer and pids are optional
		}
		t.dirs[c] = dir
	}
	if t.dirs[Memory] == "" {
		return nil, fmt.Errorf("%w: no memory hierarchy", ErrUnavailable)
	}
	t.setup = fmt.Sprintf("cgroup v1 under %s", t.dirs[Memory])
	if t.dirs[Freezer] == "" {
		t.setup += " (no freezer hierarchy: pause stops the process group with SIGSTOP)"
	}
	return t, nil
}

func openV2(o Options, mounts []*procfs.MountInfo, own []procfs.Cgroup) (*Tree, error) {
	var m *procfs.MountInfo
	for _, mi := range mounts {
		if mi.FSType == "cgroup2" {
			m = mi
			break
		}
	}
	if m == nil {
		return nil, fmt.Errorf("%w: no cgroup v1 memory hierarchy and no cgroup2 mount", ErrUnavailable)
	}
	if o.Parent != "" {
		t, err := openUnder(m, o.Parent, o, false)
		if err != nil {
			return nil, err
		}
		t.setup = fmt.Sprintf("cgroup v2 under %s (--cgroup-parent)", o.Parent)
		return t, nil
	}
	self, ok := ownPath(own, "")
	if !ok {
		return nil, fmt.Errorf("%w: own cgroup v2 path unknown", ErrUnavailable)
	}
	if path.Base(self) == controllerLeaf {
		// An earlier Open of this process moved it into its leaf: the
		// cgroup to divide is the one above.
		self = path.Dir(self)
	}
	if o.NoSystemd || !systemdBooted() {
		// Nobody else manages the hierarchy: the controller's own
		// cgroup is its to divide (a container, a hand-made tree).
		t, err := openUnder(m, self, o, true)
		if err != nil {
			return nil, fmt.Errorf("%w (no systemd to ask for a delegated cgroup)", err)
		}
		t.setup = fmt.Sprintf("cgroup v2 in the controller's own cgroup %s (no systemd manages it)", self)
		return t, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), systemdTimeout)
	defer cancel()

	// systemd owns every cgroup it did not delegate: writing under one
	// works until it reorganises the tree (a daemon-reload can take the
	// memory controller away). The controller's own cgroup is used only
	// when its unit has Delegate=yes and the controller can have it to
	// itself (a unit's main process; not a shell's child).
	why := ""
	// origin is the service the controller runs in, and originManager the
	// manager of that service: the scope asked for below stops with it.
	origin, originManager := "", ""
	if owner, err := ownerOf(ctx, self); err != nil {
		why = err.Error()
	} else {
		unit, delegated, err := owner.unitDelegates(ctx, o.PID)
		owner.Close()
		if strings.HasSuffix(unit, ".service") {
			origin, originManager = unit, owner.name
		}
		switch {
		case err != nil:
			why = err.Error()
		case !delegated:
			why = fmt.Sprintf("its unit %s has no Delegate=yes", unit)
		default:
			t, err := openUnder(m, self, o, true)
			if err == nil {
				t.setup = fmt.Sprintf("cgroup v2 in the controller's own cgroup %s: its unit %s has Delegate=yes", self, unit)
				return t, nil
			}
			why = fmt.Sprintf("its unit %s has Delegate=yes but the cgroup cannot host the batches (another process shares it?): %v", unit, err)
		}
	}
	// Ask for a scope of the controller's own, delegated: the system
	// manager as root, the user's manager otherwise.
	dial := dialUser
	if os.Geteuid() == 0 {
		dial = dialSystem
	}
	mgr, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: the controller's cgroup %s is not its own (%s), and no delegated scope can be asked for: %v; %s", ErrUnavailable, self, why, err, enforcementHint())
	}
	defer mgr.Close()
	scope := o.Name + ".scope"
	// A controller started by a service stops with it (PartOf=): systemctl
	// stop must not leave it running in its scope. Not one started from a
	// login session: it outlives the session where processes do (nohup).
	partOf := ""
	if originManager == mgr.name {
		partOf = origin
	}
	path, err := mgr.delegatedScope(ctx, scope, o.PID, partOf)
	if err != nil {
		return nil, fmt.Errorf("%w: the controller's cgroup %s is not its own (%s): %v; %s", ErrUnavailable, self, why, err, enforcementHint())
	}
	t, err := openUnder(m, path, o, true)
	if err != nil {
		return nil, fmt.Errorf("%w; %s", err, enforcementHint())
	}
	t.setup = fmt.Sprintf("cgroup v2 in the scope %s (Delegate=yes) that %s made for the controller: its own cgroup %s was not its to divide (%s)", scope, mgr.name, self, why)
	return t, nil
}

// openUnder makes the subtree under the cgroup path parentPath of the
// unified hierarchy m. With mayMove (parentPath is the controller's own
// cgroup or its scope), a parent holding processes (the controller: the
// kernel lets no cgroup with processes hand controllers down) is emptied
// by moving the controller into a leaf beside the subtree, as a
// systemd-delegated service does.
func openUnder(m *procfs.MountInfo, parentPath string, o Options, mayMove bool) (*Tree, error) {
	parent := hierarchyDir(m, parentPath)
	if !slices.Contains(readWords(filepath.Join(parent, "cgroup.controllers")), Memory) {
		return nil, fmt.Errorf("%w: %s does not offer the memory controller", ErrUnavailable, parent)
	}
	if err := enableMemory(parent); err != nil {
		if !mayMove {
			return nil, fmt.Errorf("%w: enable memory under %s: %v", ErrUnavailable, parent, err)
		}
		leaf := filepath.Join(parent, controllerLeaf)
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(o.PID)); err != nil {
			return nil, fmt.Errorf("%w: move the controller into %s: %v", ErrUnavailable, leaf, err)
		}
		if err := enableMemory(parent); err != nil {
			return nil, fmt.Errorf("%w: enable memory under %s: %v", ErrUnavailable, parent, err)
		}
	}
	dir := filepath.Join(parent, o.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := enableMemory(dir); err != nil {
		return nil, fmt.Errorf("%w: enable memory under %s: %v", ErrUnavailable, dir, err)
	}
	return &Tree{version: 2, dirs: map[string]string{Unified: dir}}, nil
}

// enableMemory makes dir's children get the memory controller (and cpu,
// for CPU time, and pids, for Limits.PidsMax, where offered); a no-op
// for what is already enabled.
func enableMemory(dir string) error {
	file := filepath.Join(dir, "cgroup.subtree_control")
	enabled := readWords(file)
	if !slices.Contains(enabled, Memory) {
		if err := writeFile(file, "+memory"); err != nil {
			return err
		}
	}
	offered := readWords(filepath.Join(dir, "cgroup.controllers"))
	for _, c := range []string{"cpu", Pids} {
		if slices.Contains(offered, c) && !slices.Contains(enabled, c) {
			_ = writeFile(file, "+"+c)
		}
	}
	return nil
}

// Setup says, for a person, which cgroup setup Open found and why: the
// version, where the subtree is, and who delegated it.
func (t *Tree) Setup() string { return t.setup }

// Version returns 1 or 2.
func (t *Tree) Version() int { return t.version }

// Dir returns the subtree's directory in the memory (v1) or unified (v2)
// hierarchy.
func (t *Tree) Dir() string { return t.dirs[t.mainController()] }

func (t *Tree) mainController() string {
	if t.version == 1 {
		return Memory
	}
	return Unified
}

// New creates the group name under the subtree with limits l: a group
// Recycle kept, renamed, when there is one (see Recycle) and l does not ask
// for a fresh one, else a new one.
// Names are the caller's to keep unique (a directory already there is
// used as it is); Leftovers finds what an earlier run left.
func (t *Tree) New(name string, l Limits) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." || name == controllerLeaf {
		return nil, fmt.Errorf("cgroup name %q: want one path element", name)
	}
	if !l.Fresh {
		if g := t.reuse(name, l); g != nil {
			return g, nil
		}
	}
	ref := Ref{Version: t.version, Dirs: map[string]string{}}
	for c, d := range t.dirs {
		ref.Dirs[c] = filepath.Join(d, name)
	}
	g := &Group{ref: ref, fd: -1, tree: t, fs: t.fs}
	var made []string
	for _, d := range ref.Dirs {
		if err := os.Mkdir(d, 0o755); errors.Is(err, os.ErrExist) {
			continue
		} else if err != nil {
			for _, m := range made {
				_ = unix.Rmdir(m)
			}
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
		made = append(made, d)
	}
	t.has.once.Do(func() {
		t.has.files = map[string]bool{}
		for _, f := range []string{"memory.memsw.limit_in_bytes", "memory.swap.max", "memory.oom.group", "pids.max"} {
			t.has.files[f] = exists(filepath.Join(g.mainDir(), f))
		}
	})
	if err := g.setLimits(l); err != nil {
		_ = g.Remove()
		return nil, err
	}
	if t.version == 2 {
		fd, err := unix.Open(g.mainDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			_ = g.Remove()
			return nil, fmt.Errorf("open cgroup: %w", err)
		}
		g.fd = fd
	}
	return g, nil
}

// Leftovers returns the groups under the subtree (what a controller that
// died left), not the controller's own leaf: every name found in any of
// its hierarchies, with the directories it still has there (a group
// removed halfway, its memory directory gone and its freezer one not,
// is one too).
func (t *Tree) Leftovers() ([]*Group, error) {
	var names []string
	seen := map[string]bool{}
	for c, d := range t.dirs {
		ents, err := os.ReadDir(d)
		if err != nil && (c == t.mainController() || !errors.Is(err, os.ErrNotExist)) {
			return nil, fmt.Errorf("list cgroups: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() && e.Name() != controllerLeaf && !seen[e.Name()] {
				seen[e.Name()] = true
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	var out []*Group
	for _, name := range names {
		ref := Ref{Version: t.version, Dirs: map[string]string{}}
		for c, d := range t.dirs {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				ref.Dirs[c] = filepath.Join(d, name)
			}
		}
		out = append(out, &Group{ref: ref, fd: -1, fs: t.fs})
	}
	return out, nil
}

// Load returns the group a Ref names, after checking that each directory
// is on a cgroup file system (a record is not trusted to name one).
func Load(ref Ref) (*Group, error) {
	if ref.Version != 1 && ref.Version != 2 {
		return nil, fmt.Errorf("cgroup ref: version %d", ref.Version)
	}
	main := Memory
	if ref.Version == 2 {
		main = Unified
	}
	if ref.Dirs[main] == "" {
		return nil, fmt.Errorf("cgroup ref: no %s directory", main)
	}
	for c, d := range ref.Dirs {
		var st unix.Statfs_t
		if err := unix.Statfs(d, &st); err != nil {
			return nil, fmt.Errorf("cgroup %s: %w", d, err)
		}
		if st.Type != unix.CGROUP_SUPER_MAGIC && st.Type != unix.CGROUP2_SUPER_MAGIC {
			return nil, fmt.Errorf("cgroup ref %s: %s is not on a cgroup file system", c, d)
		}
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	return &Group{ref: ref, fd: -1, fs: fs}, nil
}

// writeFile writes v to a kernel file in one write, without creating it.
func writeFile(path, v string) error {
	f, err := kernfile.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(v)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", v, path, werr)
	}
	return cerr
}

// readWords returns the space-separated words of a file, each without a
// leading '+'; nil when it cannot be read.
func readWords(path string) []string {
	b, err := kernfile.Read(path)
	if err != nil {
		return nil
	}
	w := strings.Fields(string(b))
	for i := range w {
		w[i] = strings.TrimPrefix(w[i], "+")
	}
	return w
}

// readInt reads a file holding one integer; "max" reads as 0.
func readInt(path string) (int64, error) {
	b, err := kernfile.Read(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return int64(min(v, 1<<62)), nil
}

// readKeyed reads a "key value" per line file (memory.stat, memory.events,
// memory.oom_control, cpu.stat) into a map.
func readKeyed(path string) (map[string]int64, error) {
	b, err := kernfile.Read(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, nil
}

// homeFiles returns the open tasks files of the process's own v1 cgroups,
// by controller (opened at the first call).
func (t *Tree) homeFiles() (map[string]*os.File, error) {
	t.homes.once.Do(func() {
		files := make(map[string]*os.File, len(t.homes.paths))
		for c, path := range t.homes.paths {
			if _, ok := t.dirs[c]; !ok {
				continue
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				for _, f := range files {
					_ = f.Close()
				}
				t.homes.err = fmt.Errorf("cgroup: the way back for a thread: %w", err)
				return
			}
			files[c] = f
		}
		t.homes.files = files
	})
	return t.homes.files, t.homes.err
}

// isBusy reports an rmdir refused because the cgroup is still in use.
func isBusy(err error) bool { return errors.Is(err, syscall.EBUSY) }

// Remove removes the groups Recycle kept and the subtree's directories,
// which must hold no other group (remove each group first), and closes the
// way back EnterThread keeps open. A directory already gone is not an
// error.
func (t *Tree) Remove() error {
	errs := []error{t.removeSpares()}
	t.homes.once.Do(func() {}) // none opened after this
	for _, f := range t.homes.files {
		_ = f.Close()
	}
	for _, d := range t.dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup subtree %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
