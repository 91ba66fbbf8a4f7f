package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fixture is a fake proc root and cgroup mount: files only, as the kernel
// would show them, so that the v2 code and discovery run without a v2
// kernel.
type fixture struct {
	t    *testing.T
	proc string
	cg   string
	pid  int
}

const fixturePID = 4242

func newFixture(t *testing.T, mountinfo, cgroupFile string) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{t: t, proc: filepath.Join(root, "proc"), cg: filepath.Join(root, "cg"), pid: fixturePID}
	mountinfo = strings.ReplaceAll(mountinfo, "CG", f.cg)
	f.write("proc/4242/mountinfo", mountinfo)
	f.write("proc/4242/cgroup", cgroupFile)
	f.write("proc/4242/stat", "4242 (lardon3d) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
	return f
}

// write creates a file under the fixture's root (parents included).
func (f *fixture) write(rel, content string) {
	f.t.Helper()
	p := filepath.Join(filepath.Dir(f.proc), rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) read(rel string) string {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(f.proc), rel))
	if err != nil {
		f.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func (f *fixture) options(parent string) Options {
	return Options{ProcRoot: f.proc, PID: f.pid, Name: "lardon3d-test", Parent: parent}
}

const v2Mountinfo = "30 25 0:26 / CG rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"

// v2Tree lays out a unified hierarchy where the controller runs in
// /app.slice/ctl and the kernel offers memory and cpu.
func v2Tree(t *testing.T) *fixture {
	f := newFixture(t, v2Mountinfo, "0::/app.slice/ctl\n")
	f.write("cg/cgroup.controllers", "cpu memory pids\n")
	f.write("cg/app.slice/ctl/cgroup.controllers", "cpu memory pids\n")
	f.write("cg/app.slice/ctl/cgroup.subtree_control", "\n")
	// What the kernel would create with the directories.
	f.write("cg/app.slice/ctl/lardon3d-test/cgroup.controllers", "cpu memory\n")
	f.write("cg/app.slice/ctl/lardon3d-test/cgroup.subtree_control", "\n")
	return f
}

// v2Group pre-creates the files the kernel creates in a new group.
func (f *fixture) v2Group(name string) string {
	dir := "cg/app.slice/ctl/lardon3d-test/" + name
	for file, content := range map[string]string{
		"memory.max": "max\n", "memory.swap.max": "max\n", "memory.oom.group": "0\n",
		"cgroup.procs": "", "cgroup.freeze": "0\n", "cgroup.events": "populated 0\nfrozen 0\n",
		"cgroup.kill": "", "memory.current": "0\n", "memory.stat": "anon 0\n", "memory.events": "oom 0\noom_kill 0\n",
	} {
		f.write(dir+"/"+file, content)
	}
	return dir
}

// v2Batch opens the fixture's tree and creates group "b" in it; it returns
// the fixture, the group's directory relative to the fixture and the group.
func v2Batch(t *testing.T, l Limits) (*fixture, string, *Group) {
	t.Helper()
	f := v2Tree(t)
	dir := f.v2Group("b")
	tree, err := Open(f.options(""))
	if err != nil {
		t.Fatal(err)
	}
	g, err := tree.New("b", l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove() })
	return f, dir, g
}

func TestV2OpenEnablesMemoryAndNewSetsLimits(t *testing.T) {
	f := v2Tree(t)
	dir := f.v2Group("batch-1")
	tree, err := Open(f.options(""))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if tree.Version() != 2 || tree.Dir() != filepath.Join(f.cg, "app.slice/ctl/lardon3d-test") {
		t.Fatalf("tree v%d at %s, want v2 under the controller's own cgroup", tree.Version(), tree.Dir())
	}
	for _, d := range []string{"cg/app.slice/ctl", "cg/app.slice/ctl/lardon3d-test"} {
		// A fixture file keeps the last write: memory, then cpu and pids
		// where offered.
		if got := f.read(d + "/cgroup.subtree_control"); got != "+cpu" && got != "+memory" && got != "+pids" {
			t.Errorf("%s/cgroup.subtree_control = %q, want memory (then cpu, pids) enabled", d, got)
		}
	}
	g, err := tree.New("batch-1", Limits{MemoryMax: 70 << 20, MemorySoft: 64 << 20})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer func() { _ = g.Remove() }()
	for file, want := range map[string]string{"memory.max": "73400320", "memory.swap.max": "0", "memory.oom.group": "1"} {
		if got := f.read(dir + "/" + file); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if g.FD() < 0 {
		t.Errorf("v2 group has no directory descriptor for CLONE_INTO_CGROUP")
	}
	if g.Ref().Version != 2 || g.Ref().Dirs[Unified] != filepath.Join(f.cg, "app.slice/ctl/lardon3d-test/batch-1") {
		t.Errorf("ref %+v", g.Ref())
	}
}

func TestV2MemoryReadings(t *testing.T) {
	f, dir, g := v2Batch(t, Limits{MemoryMax: 1 << 30})
	f.write(dir+"/memory.current", "300000000\n")
	f.write(dir+"/memory.peak", "500000000\n")
	f.write(dir+"/memory.stat", "anon 100000000\nfile 200000000\nactive_file 50000000\ninactive_file 150000000\n")
	f.write(dir+"/memory.events", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 2\noom_group_kill 1\n")
	m, err := g.Memory()
	if err != nil {
		t.Fatal(err)
	}
	want := MemoryStats{Usage: 300000000, Peak: 500000000, WorkingSet: 150000000, OOMKills: 2, File: 200000000}
	if m != want {
		t.Errorf("Memory() = %+v, want %+v", m, want)
	}
	// A kernel before 5.19 has no memory.peak: 0, not an error.
	if err := os.Remove(filepath.Join(f.cg, "app.slice/ctl/lardon3d-test/b/memory.peak")); err != nil {
		t.Fatal(err)
	}
	if m, err := g.Memory(); err != nil || m.Peak != 0 || m.Usage != 300000000 {
		t.Errorf("without memory.peak: %+v, %v; want peak 0", m, err)
	}
	f.write(dir+"/cpu.stat", "usage_usec 2500000\nuser_usec 2000000\n")
	if d, ok := g.CPUTime(); !ok || d != 2500*time.Millisecond {
		t.Errorf("CPUTime = %v, %v; want 2.5s", d, ok)
	}
}

func TestV2FreezeWaitsForTheKernelAndThawsOnTimeout(t *testing.T) {
	f, dir, g := v2Batch(t, Limits{})
	// The kernel never reports frozen: Freeze gives up and thaws.
	err := g.Freeze(30 * time.Millisecond)
	if !errors.Is(err, ErrFreezeTimeout) {
		t.Fatalf("Freeze with frozen 0: %v, want ErrFreezeTimeout", err)
	}
	if got := f.read(dir + "/cgroup.freeze"); got != "0" {
		t.Errorf("cgroup.freeze = %q after a failed freeze, want 0 (thawed)", got)
	}
	f.write(dir+"/cgroup.events", "populated 1\nfrozen 1\n")
	if err := g.Freeze(time.Second); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	if got := f.read(dir + "/cgroup.freeze"); got != "1" {
		t.Errorf("cgroup.freeze = %q, want 1", got)
	}
	if err := g.Thaw(); err != nil || f.read(dir+"/cgroup.freeze") != "0" {
		t.Errorf("Thaw: %v, cgroup.freeze %q", err, f.read(dir+"/cgroup.freeze"))
	}
}

func TestV2KillUsesCgroupKillAndWaitsForTheMembers(t *testing.T) {
	f, dir, g := v2Batch(t, Limits{})
	// Pid 4243 exists only in the fixture's proc: with cgroup.kill present
	// no real signal is sent.
	f.write(dir+"/cgroup.procs", "4243\n")
	f.write("proc/4243/stat", "4243 (step) S 1 4243 4243 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
	n, err := g.Kill(40 * time.Millisecond)
	if !errors.Is(err, ErrNotEmpty) || n != 1 {
		t.Fatalf("Kill with a live member: %d, %v; want 1, ErrNotEmpty", n, err)
	}
	if got := f.read(dir + "/cgroup.kill"); got != "1" {
		t.Errorf("cgroup.kill = %q, want 1", got)
	}
	// A zombie does not count as alive.
	f.write("proc/4243/stat", "4243 (step) Z 1 4243 4243 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")
	if n, err := g.Kill(time.Second); err != nil || n != 0 {
		t.Errorf("Kill with a zombie member: %d, %v; want 0, nil", n, err)
	}
}

func TestV2ExplicitParentMustOfferMemory(t *testing.T) {
	f := v2Tree(t)
	f.write("cg/batch.slice/cgroup.controllers", "cpu pids\n")
	f.write("cg/batch.slice/cgroup.subtree_control", "\n")
	_, err := Open(f.options("/batch.slice"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "does not offer the memory controller") {
		t.Errorf("Open under a parent without memory: %v, want ErrUnavailable naming the reason", err)
	}
}

func TestNoMemoryCgroupIsUnavailable(t *testing.T) {
	// Only a v1 cpu hierarchy and no cgroup2: the caller falls back to the
	// sampler.
	f := newFixture(t, "31 25 0:27 / CG/cpu rw - cgroup cgroup rw,cpu\n", "3:cpu:/\n")
	_, err := Open(f.options(""))
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Open: %v, want ErrUnavailable", err)
	}
	if _, err := Open(Options{ProcRoot: f.proc, PID: f.pid, Name: "a/b"}); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("Open with a name of two elements: %v, want a plain error", err)
	}
}

func TestV1DiscoveryFollowsEachHierarchyAndNamespacedRoots(t *testing.T) {
	mounts := "31 25 0:27 / CG/memory rw - cgroup cgroup rw,memory\n" +
		// A freezer mount showing only a sub-tree (a cgroup namespace).
		"32 25 0:28 /ns CG/freezer rw - cgroup cgroup rw,freezer\n" +
		// Mounted, but no group is made in it.
		"33 25 0:29 / CG/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
	f := newFixture(t, mounts, "4:memory:/jobs/ctl\n6:freezer:/ns/x\n2:cpu,cpuacct:/\n")
	tree, err := Open(f.options(""))
	if err != nil {
		t.Fatal(err)
	}
	if tree.Version() != 1 {
		t.Fatalf("version %d, want 1", tree.Version())
	}
	want := map[string]string{
		Memory:  filepath.Join(f.cg, "memory/jobs/ctl/lardon3d-test"),
		Freezer: filepath.Join(f.cg, "freezer/x/lardon3d-test"),
	}
	for c, d := range want {
		if tree.dirs[c] != d {
			t.Errorf("%s subtree %q, want %q", c, tree.dirs[c], d)
		}
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s subtree not created: %v", c, err)
		}
	}
	if _, ok := tree.dirs[CPUAcct]; ok {
		t.Errorf("cpuacct subtree: batch groups have none (the leader's rusage gives the CPU time)")
	}
	// An explicit parent is a path inside every hierarchy.
	tree, err = Open(f.options("/batch"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tree.dirs[Memory]; got != filepath.Join(f.cg, "memory/batch/lardon3d-test") {
		t.Errorf("memory subtree under --cgroup-parent: %q", got)
	}
}

// TestV1LeftoversIncludeAHalfRemovedGroup: a group whose memory directory
// is gone but not its freezer one (a controller killed between the two
// rmdirs, or a removal still under way) is a leftover too, with the
// directory it has; without it, the subtree could never be removed.
func TestV1LeftoversIncludeAHalfRemovedGroup(t *testing.T) {
	mounts := "31 25 0:27 / CG/memory rw - cgroup cgroup rw,memory\n" +
		"32 25 0:28 / CG/freezer rw - cgroup cgroup rw,freezer\n"
	f := newFixture(t, mounts, "4:memory:/ctl\n6:freezer:/ctl\n")
	tree, err := Open(f.options(""))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"memory/ctl/lardon3d-test/full", "freezer/ctl/lardon3d-test/full", "freezer/ctl/lardon3d-test/half"} {
		if err := os.MkdirAll(filepath.Join(f.cg, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	groups, err := tree.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 {
		t.Fatalf("%d leftovers, want full and half: %+v", len(groups), groups)
	}
	full, half := groups[0].Ref(), groups[1].Ref()
	if len(full.Dirs) != 2 || len(half.Dirs) != 1 || half.Dirs[Freezer] != filepath.Join(f.cg, "freezer/ctl/lardon3d-test/half") {
		t.Fatalf("leftovers: %+v and %+v", full, half)
	}
	// Killed (nothing to list: no main directory) and removed like any.
	if n, err := groups[1].Kill(time.Second); n != 0 || err != nil {
		t.Errorf("kill of the half-removed group: %d, %v", n, err)
	}
	if err := groups[1].Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(half.Dirs[Freezer]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the half-removed group is still there: %v", err)
	}
}
