package measure

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoCgroup reports that no writable cgroup hierarchy was found.
var ErrNoCgroup = errors.New("no writable cgroup hierarchy")

// Version is the cgroup hierarchy flavour.
type Version int

// The cgroup flavours.
const (
	// V1 is the legacy hierarchy: one mount per controller.
	V1 Version = 1
	// V2 is the unified hierarchy.
	V2 Version = 2
)

// Cgroup is the bench's envelope: a memory cgroup with a limit, and a CPU
// accounting cgroup (the same directory on v2, the cpuacct hierarchy on v1;
// empty when not available).
type Cgroup struct {
	// Version is the hierarchy flavour.
	Version Version
	// MemDir is the memory cgroup directory.
	MemDir string
	// CPUDir is the CPU accounting cgroup directory, "" when unavailable.
	CPUDir string
	// Limit is the memory limit in bytes.
	Limit int64
}

// DetectVersion tells v1 from v2 by the filesystem type of root
// (/sys/fs/cgroup): cgroup2fs means v2.
func DetectVersion(root string) (Version, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", root, err)
	}
	const cgroup2Magic = 0x63677270
	if st.Type == cgroup2Magic {
		return V2, nil
	}
	return V1, nil
}

// ParseSelfCgroup returns, from the text of /proc/self/cgroup, the path of
// the v1 hierarchy carrying controller (for example "memory"), or of the
// unified hierarchy when controller is "".
func ParseSelfCgroup(r io.Reader, controller string) (string, bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" {
			if parts[0] == "0" && parts[1] == "" {
				return parts[2], true
			}
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == controller {
				return parts[2], true
			}
		}
	}
	return "", false
}

func selfPath(procRoot, controller string) string {
	f, err := os.Open(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return "/"
	}
	defer f.Close()
	p, ok := ParseSelfCgroup(f, controller)
	if !ok {
		return "/"
	}
	return p
}

// Create makes a child cgroup named name under the caller's own cgroup (so
// that the machine's own accounting still covers it) with a memory limit of
// limit bytes. cgRoot is usually /sys/fs/cgroup and procRoot /proc.
func Create(cgRoot, procRoot, name string, limit int64) (*Cgroup, error) {
	v, err := DetectVersion(cgRoot)
	if err != nil {
		return nil, err
	}
	cg := &Cgroup{Version: v, Limit: limit}
	switch v {
	case V2:
		parent := filepath.Join(cgRoot, selfPath(procRoot, ""))
		// A v2 process may not sit in an inner node that delegates
		// controllers; a sibling under the parent is the usual answer, but
		// the caller's own cgroup is tried first.
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create %s: %w: %w", dir, ErrNoCgroup, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "memory.max")); err != nil {
			_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0o644)
		}
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			_ = os.Remove(dir)
			return nil, fmt.Errorf("set memory.max on %s: %w", dir, err)
		}
		_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0o644)
		cg.MemDir, cg.CPUDir = dir, dir
	default:
		memRoot := filepath.Join(cgRoot, "memory")
		dir := filepath.Join(memRoot, selfPath(procRoot, "memory"), name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create %s: %w: %w", dir, ErrNoCgroup, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			_ = os.Remove(dir)
			return nil, fmt.Errorf("set memory.limit_in_bytes on %s: %w", dir, err)
		}
		// No swap on this kind of machine; where there is some, forbid it so
		// an overrun is an OOM kill and not a slow-down.
		_ = os.WriteFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644)
		cg.MemDir = dir
		cpuRoot := filepath.Join(cgRoot, "cpuacct")
		if _, err := os.Stat(filepath.Join(cpuRoot, "cpuacct.usage")); err == nil {
			cdir := filepath.Join(cpuRoot, selfPath(procRoot, "cpuacct"), name)
			if err := os.Mkdir(cdir, 0o755); err == nil || errors.Is(err, os.ErrExist) {
				cg.CPUDir = cdir
			}
		}
	}
	return cg, nil
}

// Open returns the cgroup Create made, from its directories.
func Open(version Version, memDir, cpuDir string) (*Cgroup, error) {
	cg := &Cgroup{Version: version, MemDir: memDir, CPUDir: cpuDir}
	name := "memory.limit_in_bytes"
	if version == V2 {
		name = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(memDir, name))
	if err != nil {
		return nil, fmt.Errorf("open cgroup %s: %w", memDir, err)
	}
	s := strings.TrimSpace(string(b))
	if s != "max" {
		cg.Limit, _ = strconv.ParseInt(s, 10, 64)
	}
	return cg, nil
}

// Enter moves pid into the cgroup (both hierarchies on v1).
func (c *Cgroup) Enter(pid int) error {
	dirs := []string{c.MemDir}
	if c.CPUDir != "" && c.CPUDir != c.MemDir {
		dirs = append(dirs, c.CPUDir)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("enter %s: %w", d, err)
		}
	}
	return nil
}

// Pids lists the processes in the memory cgroup and in every cgroup below
// it (the controller's batches run in cgroups of their own inside the
// envelope).
func (c *Cgroup) Pids() ([]int, error) {
	var pids []int
	err := filepath.WalkDir(c.MemDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != c.MemDir && errors.Is(err, fs.ErrNotExist) {
				return nil // a batch's cgroup removed meanwhile
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			if path != c.MemDir && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", c.MemDir, err)
	}
	return pids, nil
}

// OOMKills reads the cumulative OOM kill count of the memory cgroup
// (memory.events oom_kill on v2, memory.oom_control oom_kill on v1).
func (c *Cgroup) OOMKills() (int64, error) {
	// The envelope's own kills, not its children's: a batch the kernel
	// stops at its own cgroup's limit is the controller's enforcement, not
	// an overrun of the envelope (v1 counts per cgroup; v2's memory.events
	// counts the subtree, memory.events.local the cgroup alone).
	name := "memory.oom_control"
	if c.Version == V2 {
		name = "memory.events"
		if _, err := os.Stat(filepath.Join(c.MemDir, "memory.events.local")); err == nil {
			name = "memory.events.local"
		}
	}
	f, err := os.Open(filepath.Join(c.MemDir, name))
	if err != nil {
		return 0, fmt.Errorf("read oom count: %w", err)
	}
	defer f.Close()
	v, ok := ParseKeyed(f, "oom_kill")
	if !ok {
		return 0, fmt.Errorf("read oom count: no oom_kill in %s", name)
	}
	return v, nil
}

// CPUNanos reads the cumulative CPU time of the accounting cgroup, in ns;
// ok is false when there is no such cgroup.
func (c *Cgroup) CPUNanos() (int64, bool) {
	if c.CPUDir == "" {
		return 0, false
	}
	if c.Version == V2 {
		f, err := os.Open(filepath.Join(c.CPUDir, "cpu.stat"))
		if err != nil {
			return 0, false
		}
		defer f.Close()
		us, ok := ParseKeyed(f, "usage_usec")
		return us * 1000, ok
	}
	b, err := os.ReadFile(filepath.Join(c.CPUDir, "cpuacct.usage"))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// UsageBytes reads the memory cgroup's current charge (RSS plus page cache).
func (c *Cgroup) UsageBytes() (int64, error) {
	name := "memory.usage_in_bytes"
	if c.Version == V2 {
		name = "memory.current"
	}
	b, err := os.ReadFile(filepath.Join(c.MemDir, name))
	if err != nil {
		return 0, fmt.Errorf("read usage: %w", err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// CacheBytes reads the page cache charged to the memory cgroup.
func (c *Cgroup) CacheBytes() int64 {
	f, err := os.Open(filepath.Join(c.MemDir, "memory.stat"))
	if err != nil {
		return 0
	}
	defer f.Close()
	key := "total_cache"
	if c.Version == V2 {
		key = "file"
	}
	v, _ := ParseKeyed(f, key)
	return v
}

// Reclaim drops the page cache still charged to the cgroup by earlier runs
// (v1 memory.force_empty, which needs an empty cgroup; v2 memory.reclaim),
// so that each run starts with the whole envelope free: a probe that reads
// the cgroup's usage must not see the previous peer's files.
func (c *Cgroup) Reclaim() error {
	if c.Version == V2 {
		err := os.WriteFile(filepath.Join(c.MemDir, "memory.reclaim"), []byte(strconv.FormatInt(c.Limit, 10)), 0o644)
		if err != nil && !errors.Is(err, syscall.EAGAIN) {
			return fmt.Errorf("reclaim %s: %w", c.MemDir, err)
		}
		return nil
	}
	if err := os.WriteFile(filepath.Join(c.MemDir, "memory.force_empty"), []byte("0"), 0o644); err != nil {
		return fmt.Errorf("reclaim %s: %w", c.MemDir, err)
	}
	return nil
}

// KillAll sends SIGKILL to every process still in the cgroup (the bench's
// own leftovers, such as a task-spooler server) and reports how many.
func (c *Cgroup) KillAll() int {
	pids, _ := c.Pids()
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return len(pids)
}

// Destroy removes the cgroup directories and the cgroups below them; they
// must hold no process.
func (c *Cgroup) Destroy() error {
	var errs []error
	if c.CPUDir != "" && c.CPUDir != c.MemDir {
		if err := removeCgroupTree(c.CPUDir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := removeCgroupTree(c.MemDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes the cgroup dir and, first, every cgroup below
// it (the subtree a controller keeps for its restarts), deepest first.
func removeCgroupTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return os.Remove(dir)
}

// ParseKeyed returns the value of key in a "key value" per line file such
// as memory.events, memory.oom_control or memory.stat.
func ParseKeyed(r io.Reader, key string) (int64, bool) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == key {
			v, err := strconv.ParseInt(f[1], 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
