package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/lardon3d/lardon3d-controller/pkg/kernfile"
)

// Group is one batch's control group.
type Group struct {
	ref Ref
	// fd is the v2 directory, open for CLONE_INTO_CGROUP; -1 on v1.
	fd   int
	tree *Tree // nil for a group found by Leftovers or Load
	fs   procfs.FS
	// limits are what setLimits last wrote (zero: none, as in a new group).
	limits Limits
	// froze: the group was asked to freeze at least once (Freeze, Kill on
	// v1); Recycle does not keep it.
	froze atomic.Bool
	// sealed: a kill set pids.max to 0 (sealPids); Recycle does not keep it.
	sealed atomic.Bool
}

// MemoryStats are a group's memory readings.
type MemoryStats struct {
	// Usage is what the group is charged now, page cache included.
	Usage int64
	// Peak is the kernel's high-water mark of Usage since the group was
	// created or reused (a reused group starts with at most
	// RecycleResidue bytes still charged); 0 where the kernel keeps none
	// (v2 before Linux 5.19).
	Peak int64
	// WorkingSet is Usage minus the inactive file pages, which the kernel
	// reclaims before it kills: what the batch needs, as the kubelet counts
	// it.
	WorkingSet int64
	// OOMKills counts the processes the kernel killed at the limit.
	OOMKills int64
	// File is the page cache charged to the group (part of Usage).
	File int64
}

// Ref returns what names the group on disk.
func (g *Group) Ref() Ref { return g.ref }

// Dir returns the group's directory in the memory (v1) or unified (v2)
// hierarchy.
func (g *Group) Dir() string { return g.mainDir() }

func (g *Group) mainDir() string { return g.ref.Main() }

// procsDir is where the group's processes are listed: its main directory,
// or, in a group a crash left half removed, a directory it still has (on
// v1 every hierarchy lists the same processes for a group the controller
// made); "" when none is left.
func (g *Group) procsDir() string {
	if d := g.mainDir(); d != "" {
		return d
	}
	for _, c := range []string{Freezer, CPUAcct} {
		if d, ok := g.ref.Dirs[c]; ok {
			return d
		}
	}
	return ""
}

// FD returns the v2 directory's descriptor, for SysProcAttr.UseCgroupFD;
// -1 on v1 (use EnterThread).
func (g *Group) FD() int { return g.fd }

// EnterThread moves the calling OS thread into the group (v1), so that a
// child it forks is born inside. The caller must hold the thread with
// runtime.LockOSThread and call leave right after the fork: leave puts the
// thread back into the cgroups of the process the tree was opened for,
// where the controller's threads live. On v2 (use FD) it does nothing.
func (g *Group) EnterThread() (leave func() error, err error) {
	nothing := func() error { return nil }
	if g.ref.Version != 1 {
		return nothing, nil
	}
	if g.tree == nil {
		return nil, errors.New("cgroup: EnterThread on a group not created by this process")
	}
	// The way back is open before the way in (the tree keeps it open):
	// inside the batch's memory cgroup the thread's kernel allocations (an
	// open file) are charged to the batch, and a small limit would refuse
	// them.
	homeOf, err := g.tree.homeFiles()
	if err != nil {
		return nil, err
	}
	var homes, doors []*os.File
	closeDoors := func() {
		for _, f := range doors {
			_ = f.Close()
		}
	}
	// Memory last in, first out: a thread in the batch's freezer but not
	// in its memory cgroup charges nothing to the batch.
	for _, c := range []string{Freezer, Pids, Memory} {
		d, ok := g.ref.Dirs[c]
		if !ok {
			continue
		}
		home := homeOf[c]
		if home == nil {
			closeDoors()
			return nil, fmt.Errorf("cgroup: no way back from the %s hierarchy", c)
		}
		door, err := kernfile.OpenFile(filepath.Join(d, "tasks"), os.O_WRONLY, 0)
		if err != nil {
			closeDoors()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		homes, doors = append(homes, home), append(doors, door)
	}
	id := []byte(strconv.Itoa(unix.Gettid()))
	entered := 0
	leave = func() error {
		var errs []error
		for i := entered - 1; i >= 0; i-- {
			if _, err := homes[i].Write(id); err != nil {
				errs = append(errs, fmt.Errorf("cgroup: leave %s: %w", doors[i].Name(), err))
			}
		}
		closeDoors()
		return errors.Join(errs...)
	}
	for _, door := range doors {
		if _, err := door.Write(id); err != nil {
			return nil, errors.Join(fmt.Errorf("cgroup: enter %s: %w", door.Name(), err), leave())
		}
		entered++
	}
	return leave, nil
}

// Procs lists the group's processes (zombies included on some kernels).
func (g *Group) Procs() ([]int, error) {
	d := g.procsDir()
	if d == "" {
		return nil, fmt.Errorf("cgroup: no directory left: %w", os.ErrNotExist)
	}
	b, err := kernfile.Read(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Live lists the group's processes that can still run: not zombies, not
// gone.
func (g *Group) Live() ([]int, error) {
	pids, err := g.Procs()
	if err != nil {
		return nil, err
	}
	out := pids[:0]
	for _, pid := range pids {
		p, err := g.fs.Proc(pid)
		if err != nil {
			continue
		}
		st, err := p.Stat()
		if err != nil || st.State == "Z" || st.State == "X" || st.State == "x" {
			continue
		}
		out = append(out, pid)
	}
	return out, nil
}

// Memory reads the group's memory.
func (g *Group) Memory() (MemoryStats, error) {
	var m MemoryStats
	d := g.mainDir()
	var err error
	if g.ref.Version == 1 {
		if m.Usage, err = readInt(filepath.Join(d, "memory.usage_in_bytes")); err != nil {
			return m, err
		}
		ended, st, _ := v1Ended(d)
		m.Peak, m.File, m.OOMKills = ended.Peak, ended.File, ended.OOMKills
		m.WorkingSet = max(0, m.Usage-st["total_inactive_file"])
		return m, nil
	}
	if m.Usage, err = readInt(filepath.Join(d, "memory.current")); err != nil {
		return m, err
	}
	m.Peak, _ = readInt(filepath.Join(d, "memory.peak"))
	st, _ := readKeyed(filepath.Join(d, "memory.stat"))
	m.WorkingSet = max(0, m.Usage-st["inactive_file"])
	m.File = st["file"]
	ev, _ := readKeyed(filepath.Join(d, "memory.events"))
	m.OOMKills = ev["oom_kill"]
	return m, nil
}

// PeakMemory reads what is left to know of a group whose processes have
// all ended: the kernel's peak, the page cache still charged and the OOM
// kills; Usage and WorkingSet are left zero. On v1 that is one file fewer
// than Memory, at every batch's end.
func (g *Group) PeakMemory() (MemoryStats, error) {
	if g.ref.Version != 1 {
		return g.Memory()
	}
	m, _, err := v1Ended(g.mainDir())
	return m, err
}

// v1Ended reads, in the v1 group directory d, the peak (its error is
// returned), the page cache charged and the OOM kills, and returns
// memory.stat for the caller's other counts.
func v1Ended(d string) (m MemoryStats, st map[string]int64, err error) {
	m.Peak, err = readInt(filepath.Join(d, "memory.max_usage_in_bytes"))
	st, _ = readKeyed(filepath.Join(d, "memory.stat"))
	m.File = st["total_cache"]
	oom, _ := readKeyed(filepath.Join(d, "memory.oom_control"))
	m.OOMKills = oom["oom_kill"]
	return m, st, err
}

// CPUTime returns the CPU time the group's processes used: v2's cpu.stat
// (v1 groups have no cpuacct directory, but those an earlier version
// recorded); false when no CPU accounting is available.
func (g *Group) CPUTime() (time.Duration, bool) {
	if g.ref.Version == 1 {
		d, ok := g.ref.Dirs[CPUAcct]
		if !ok {
			return 0, false
		}
		ns, err := readInt(filepath.Join(d, "cpuacct.usage"))
		return time.Duration(ns), err == nil
	}
	st, err := readKeyed(filepath.Join(g.mainDir(), "cpu.stat"))
	if err != nil {
		return 0, false
	}
	us, ok := st["usage_usec"]
	return time.Duration(us) * time.Microsecond, ok
}

// setLimits writes l, where it differs from what the group has (a new
// group has no limit). The memory-and-swap limit (v1) and swap limit (v2)
// are set where the kernel has them, so that a batch cannot go past its
// limit by swapping.
func (g *Group) setLimits(l Limits) error {
	if err := g.setPidsMax(l.PidsMax); err != nil {
		return err
	}
	d := g.mainDir()
	if g.ref.Version == 1 {
		if l.MemoryMax != g.limits.MemoryMax {
			// The kernel keeps memsw.limit >= limit at every step: a
			// higher limit is written after memsw, a lower one before.
			files := []string{"memory.limit_in_bytes"}
			if g.tree.has.files["memory.memsw.limit_in_bytes"] {
				if raised(g.limits.MemoryMax, l.MemoryMax) {
					files = []string{"memory.memsw.limit_in_bytes", "memory.limit_in_bytes"}
				} else {
					files = append(files, "memory.memsw.limit_in_bytes")
				}
			}
			for _, f := range files {
				if err := writeFile(filepath.Join(d, f), v1Limit(l.MemoryMax)); err != nil {
					return fmt.Errorf("set the memory limit (%s): %w", f, err)
				}
			}
		}
		if l.MemorySoft != g.limits.MemorySoft {
			if err := writeFile(filepath.Join(d, "memory.soft_limit_in_bytes"), v1Limit(l.MemorySoft)); err != nil {
				return fmt.Errorf("set memory soft limit: %w", err)
			}
		}
		g.limits = l
		return nil
	}
	if l.MemoryMax > 0 {
		if err := writeFile(filepath.Join(d, "memory.max"), strconv.FormatInt(l.MemoryMax, 10)); err != nil {
			return fmt.Errorf("set memory.max: %w", err)
		}
		if g.tree.has.files["memory.swap.max"] {
			if err := writeFile(filepath.Join(d, "memory.swap.max"), "0"); err != nil {
				return fmt.Errorf("set memory.swap.max: %w", err)
			}
		}
	}
	if g.tree.has.files["memory.oom.group"] {
		if err := writeFile(filepath.Join(d, "memory.oom.group"), "1"); err != nil {
			return fmt.Errorf("set memory.oom.group: %w", err)
		}
	}
	g.limits = l
	return nil
}

// setPidsMax writes pids.max where the group has the pids controller (v1:
// its directory in that hierarchy; v2: the file in its directory).
func (g *Group) setPidsMax(n int64) error {
	if n == g.limits.PidsMax {
		return nil
	}
	var file string
	switch {
	case g.ref.Version == 1 && g.ref.Dirs[Pids] != "":
		file = filepath.Join(g.ref.Dirs[Pids], "pids.max")
	case g.ref.Version == 2 && g.tree.has.files["pids.max"]:
		file = filepath.Join(g.mainDir(), "pids.max")
	default:
		return nil
	}
	v := "max"
	if n > 0 {
		v = strconv.FormatInt(n, 10)
	}
	if err := writeFile(file, v); err != nil {
		return fmt.Errorf("set pids.max: %w", err)
	}
	return nil
}

// v1Limit is a v1 limit file's text for n bytes, 0 meaning none.
func v1Limit(n int64) string {
	if n <= 0 {
		return "-1"
	}
	return strconv.FormatInt(n, 10)
}

// raised reports whether the limit to goes above from (0 is no limit).
func raised(from, to int64) bool {
	return from > 0 && (to <= 0 || to > from)
}

// CanFreeze reports whether the group can be frozen (v2 always; v1 when
// the freezer hierarchy is mounted).
func (g *Group) CanFreeze() bool {
	if g.ref.Version == 2 {
		return true
	}
	_, ok := g.ref.Dirs[Freezer]
	return ok
}

// Freeze stops every process of the group and returns once the kernel
// says the group is frozen, or ErrFreezeTimeout after wait (the group is
// then thawed again).
func (g *Group) Freeze(wait time.Duration) error {
	if !g.CanFreeze() {
		return errors.New("cgroup: no freezer")
	}
	deadline := time.Now().Add(wait)
	for poll := pollBackoff(20 * time.Millisecond); ; {
		if err := g.setFrozen(true); err != nil {
			return err
		}
		frozen, err := g.Frozen()
		if err != nil {
			return err
		}
		if frozen {
			return nil
		}
		if time.Now().After(deadline) {
			_ = g.Thaw()
			return fmt.Errorf("%w (%v)", ErrFreezeTimeout, wait)
		}
		time.Sleep(poll.Step())
	}
}

// Thaw lets the group's processes run again.
func (g *Group) Thaw() error {
	if !g.CanFreeze() {
		return errors.New("cgroup: no freezer")
	}
	return g.setFrozen(false)
}

func (g *Group) setFrozen(on bool) error {
	if on {
		g.froze.Store(true)
	}
	if g.ref.Version == 1 {
		v := "THAWED"
		if on {
			v = "FROZEN"
		}
		return writeFile(filepath.Join(g.ref.Dirs[Freezer], "freezer.state"), v)
	}
	v := "0"
	if on {
		v = "1"
	}
	return writeFile(filepath.Join(g.mainDir(), "cgroup.freeze"), v)
}

// Frozen reports whether the kernel has every process of the group frozen.
func (g *Group) Frozen() (bool, error) {
	if g.ref.Version == 1 {
		b, err := kernfile.Read(filepath.Join(g.ref.Dirs[Freezer], "freezer.state"))
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(b)) == "FROZEN", nil
	}
	ev, err := readKeyed(filepath.Join(g.mainDir(), "cgroup.events"))
	if err != nil {
		return false, err
	}
	return ev["frozen"] == 1, nil
}

// Signal sends sig to every process listed in the group and returns how
// many it reached.
func (g *Group) Signal(sig unix.Signal) (int, error) {
	pids, err := g.Procs()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pid := range pids {
		if unix.Kill(pid, sig) == nil {
			n++
		}
	}
	return n, nil
}

// Kill sends SIGKILL to every process of the group (v2 cgroup.kill; else
// with the group frozen, so that nothing forks between the listing and the
// signal) and waits up to wait for none to be alive. It returns how many
// live processes it found first; ErrNotEmpty when some survived the wait.
func (g *Group) Kill(wait time.Duration) (int, error) {
	live, err := g.Live()
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	found := len(live)
	deadline := time.Now().Add(wait)
	for poll := pollBackoff(50 * time.Millisecond); ; {
		if len(live) == 0 {
			return found, nil
		}
		g.killOnce(live)
		if time.Now().After(deadline) {
			return found, fmt.Errorf("%w: %d in %s", ErrNotEmpty, len(live), g.mainDir())
		}
		time.Sleep(poll.Step())
		if live, err = g.Live(); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return found, nil
			}
			return found, err
		}
	}
}

// sealPids lets nothing in the group fork any more (pids.max 0, where the
// group has the pids controller): a group being killed has no use for a new
// process, and a fork bomb forks faster than a listing of its members and
// their signals, so each pass would miss the children born meanwhile and
// the kill would take as long as the machine takes to lose the race (a
// minute and more on two cores). Once sealed, one pass kills every member.
func (g *Group) sealPids() {
	var file string
	switch {
	case g.ref.Version == 1 && g.ref.Dirs[Pids] != "":
		file = filepath.Join(g.ref.Dirs[Pids], "pids.max")
	case g.ref.Version == 2 && g.tree != nil && g.tree.has.files["pids.max"]:
		file = filepath.Join(g.mainDir(), "pids.max")
	default:
		return
	}
	if !g.sealed.Load() && writeFile(file, "0") == nil {
		g.sealed.Store(true)
	}
}

func (g *Group) killOnce(live []int) {
	if g.ref.Version == 2 && exists(filepath.Join(g.mainDir(), "cgroup.kill")) {
		if writeFile(filepath.Join(g.mainDir(), "cgroup.kill"), "1") == nil {
			return
		}
	}
	g.sealPids()
	frozen := g.CanFreeze() && g.setFrozen(true) == nil
	if pids, err := g.Procs(); err == nil || live == nil {
		live = pids
	}
	for _, pid := range live {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	if frozen {
		_ = g.setFrozen(false)
	}
}

// Remove closes the group and removes its directories; the group must
// hold no live process. A directory already gone is not an error.
func (g *Group) Remove() error {
	if g.fd >= 0 {
		_ = unix.Close(g.fd)
		g.fd = -1
	}
	var errs []error
	for _, d := range g.ref.Dirs {
		// While busy (the last processes are still exiting), rmdir is
		// tried again after 1 ms, doubling, 10 tries in about 0.5 s.
		var err error
		_ = wait.ExponentialBackoff(wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 10}, func() (bool, error) {
			err = unix.Rmdir(d)
			return err == nil || errors.Is(err, unix.ENOENT) || !isBusy(err), nil
		})
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// pollBackoff spaces the looks at a group's state while waiting for it
// to change: 1 ms, doubling up to ceiling.
func pollBackoff(ceiling time.Duration) wait.Backoff {
	return wait.Backoff{Duration: time.Millisecond, Factor: 2, Cap: ceiling, Steps: math.MaxInt32}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// KillAll sends SIGKILL once to every process of the group, without
// waiting (see Kill).
func (g *Group) KillAll() { g.killOnce(nil) }

// Attach moves pid into the group in every hierarchy: for a process that
// could not be born inside it (a kernel without CLONE_INTO_CGROUP).
func (g *Group) Attach(pid int) error {
	var errs []error
	for _, d := range g.ref.Dirs {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
