package probe

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const gib = int64(1) << 30

// fixture returns Options probing the tree testdata/name.
func fixture(t *testing.T, name string) Options {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		ProcRoot:   filepath.Join(root, "proc"),
		SysRoot:    filepath.Join(root, "sys"),
		CgroupRoot: filepath.Join(root, "cgroup"),
		NvidiaSMI:  NvidiaSMIOff,
		Clock:      clocktesting.NewFakePassiveClock(t0),
		Affinity:   func() (int, error) { return 8, nil },
		StatVolume: fakeVolumes(map[string]VolumeStat{
			"/scratch/hdd":  {FreeBytes: 500 * gib, Dev: unix.Mkdev(8, 1)},
			"/scratch/nvme": {FreeBytes: 100 * gib, Dev: unix.Mkdev(259, 2)},
			"/scratch/tmp":  {FreeBytes: 1 * gib, Dev: unix.Mkdev(0, 42)},
		}),
	}
}

func fakeVolumes(m map[string]VolumeStat) func(string) (VolumeStat, error) {
	return func(p string) (VolumeStat, error) {
		if v, ok := m[p]; ok {
			return v, nil
		}
		return VolumeStat{}, os.ErrNotExist
	}
}

func mustSnapshot(t *testing.T, opts Options) (*Prober, governor.Snapshot) {
	t.Helper()
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

func TestSnapshotCgroupV1(t *testing.T) {
	opts := fixture(t, "v1")
	opts.ScratchDirs = []string{"/scratch/hdd", "/scratch/gone", "/scratch/tmp"}
	p, got := mustSnapshot(t, opts)
	want := governor.Snapshot{
		Taken:             t0,
		MemTotal:          16318480 * 1024,
		MemAvailable:      8388608 * 1024,
		CgroupMemoryLimit: 2147483648,
		CgroupMemoryUsage: 314572800,
		SwapTotal:         2097148 * 1024,
		SwapFree:          (2097148 - 1048576) * 1024,
		CPUs:              2, // affinity 8, quota 1.5 cores
		CPUQuota:          1.5,
		Load1:             1.5, Load5: 0.75, Load15: 0.25,
		PSI: governor.PSI{
			Available: true,
			CPU:       governor.Pressure{SomeAvg10: 1.25, SomeAvg60: 0.5, SomeTotal: 123456},
			IO:        governor.Pressure{SomeAvg10: 12.5, SomeAvg60: 6.25, FullAvg10: 10, FullAvg60: 5, SomeTotal: 999},
		},
		GPUs: []governor.GPU{{
			ID: "amdgpu:0000:03:00.0", Name: "AMD Radeon RX 6600", Known: true,
			TotalBytes: 8 * gib, FreeBytes: 7 * gib,
		}},
		Scratch: []governor.ScratchVolume{
			{Path: "/scratch/hdd", FreeBytes: 500 * gib, Rotational: true}, // partition sda1 of a spinning sda
			{Path: "/scratch/tmp", FreeBytes: 1 * gib},                     // 0:42 unknown: not rotational
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot:\n got %+v\nwant %+v", got, want)
	}
	if m, c := p.CgroupVersion(); m != "v1" || c != "v1" {
		t.Errorf("CgroupVersion() = %s, %s; want v1, v1", m, c)
	}
}

func TestSnapshotCgroupV2NoPSIZram(t *testing.T) {
	opts := fixture(t, "v2")
	opts.ScratchDirs = []string{"/scratch/nvme"}
	p, got := mustSnapshot(t, opts)
	want := governor.Snapshot{
		Taken:             t0,
		MemTotal:          8000000 * 1024,
		MemAvailable:      6000000 * 1024,
		CgroupMemoryLimit: 1 * gib,        // job.scope's 1Gi beats user.slice's 4Gi
		CgroupMemoryUsage: 50 * (1 << 20), // usage of job.scope, not of the parent
		SwapTotal:         2000000 * 1024, // /dev/dm-1 only
		SwapFree:          1500000 * 1024,
		ZramTotal:         5000000 * 1024,
		ZramFree:          4000000 * 1024,
		CPUs:              1, // quota 0.5 from the parent
		CPUQuota:          0.5,
		Load1:             0.1, Load5: 0.2, Load15: 0.3,
		PSI: governor.PSI{Available: false},
		GPUs: []governor.GPU{{
			ID: "amdgpu:0000:05:00.0", Name: "AMD GPU card1", Known: true, Unified: true,
			TotalBytes: 16 * gib, FreeBytes: 15 * gib,
		}},
		Scratch: []governor.ScratchVolume{{Path: "/scratch/nvme", FreeBytes: 100 * gib}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot:\n got %+v\nwant %+v", got, want)
	}
	if m, c := p.CgroupVersion(); m != "v2" || c != "v2" {
		t.Errorf("CgroupVersion() = %s, %s; want v2, v2", m, c)
	}
}

func TestSnapshotRereadsCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	mkfile(t, filepath.Join(dir, "proc", "meminfo"), "MemTotal: 1000 kB\nMemAvailable: 500 kB\n")
	mkfile(t, filepath.Join(dir, "proc", "loadavg"), "0 0 0 1/1 1\n")
	mkfile(t, filepath.Join(dir, "proc", "self", "cgroup"), "0::/a\n")
	limit := filepath.Join(dir, "cgroup", "a", "memory.max")
	mkfile(t, limit, "max\n")
	mkfile(t, filepath.Join(dir, "cgroup", "a", "memory.current"), "4096\n")
	p, err := New(Options{ProcRoot: filepath.Join(dir, "proc"), SysRoot: filepath.Join(dir, "sys"),
		CgroupRoot: filepath.Join(dir, "cgroup"), NvidiaSMI: NvidiaSMIOff, Affinity: func() (int, error) { return 3, nil }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.CgroupMemoryLimit != 0 || s.CgroupMemoryUsage != 0 || s.CPUs != 3 || s.SwapTotal != 0 {
		t.Fatalf("no limit: got limit %d usage %d cpus %d swap %d; want 0 0 3 0", s.CgroupMemoryLimit, s.CgroupMemoryUsage, s.CPUs, s.SwapTotal)
	}
	mkfile(t, limit, "65536\n")
	if s, err = p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if s.CgroupMemoryLimit != 65536 || s.CgroupMemoryUsage != 4096 {
		t.Fatalf("after the limit was set: got %d/%d, want 65536/4096", s.CgroupMemoryLimit, s.CgroupMemoryUsage)
	}
	mkfile(t, limit, "garbage\n")
	if _, err := p.Snapshot(); err == nil || !strings.Contains(err.Error(), "memory.max") {
		t.Fatalf("garbage limit: got %v, want an error naming memory.max", err)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{ProcRoot: filepath.Join(t.TempDir(), "nope")}); err == nil {
		t.Error("missing proc root: want an error")
	}
	dir := t.TempDir()
	mkfile(t, filepath.Join(dir, "self", "cgroup"), "not a cgroup line\n")
	if _, err := New(Options{ProcRoot: dir, NvidiaSMI: NvidiaSMIOff}); err == nil {
		t.Error("unparseable self/cgroup: want an error")
	}
	// No meminfo: Snapshot fails, New does not.
	p, err := New(Options{ProcRoot: t.TempDir(), NvidiaSMI: NvidiaSMIOff})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Snapshot(); err == nil || !strings.Contains(err.Error(), "meminfo") {
		t.Errorf("missing meminfo: got %v, want an error naming meminfo", err)
	}
	opts := fixture(t, "v2")
	opts.Affinity = func() (int, error) { return 0, errors.New("boom") }
	p, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Snapshot(); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("affinity failure: got %v, want it wrapped", err)
	}
}

func TestNvidiaFixtureScript(t *testing.T) {
	opts := fixture(t, "v2")
	script, err := filepath.Abs(filepath.Join("testdata", "nvidia-smi.sh"))
	if err != nil {
		t.Fatal(err)
	}
	opts.NvidiaSMI = script
	opts.SysRoot = t.TempDir() // no AMD
	_, s := mustSnapshot(t, opts)
	want := []governor.GPU{
		{ID: "nvidia:0", Name: "NVIDIA GeForce RTX 3090", Known: true, TotalBytes: 24 * gib, FreeBytes: 23 * gib},
		{ID: "nvidia:1", Name: "NVIDIA A100-SXM4-40GB", Known: true, TotalBytes: 40 * gib, FreeBytes: 960 * mib},
		{ID: "nvidia:2", Name: "NVIDIA Jetson"},
	}
	if !reflect.DeepEqual(s.GPUs, want) {
		t.Fatalf("GPUs:\n got %+v\nwant %+v", s.GPUs, want)
	}
}

// TestNvidiaPacedAndFailure: nvidia-smi runs at most once per GPUPeriod; when
// it starts failing, the GPUs seen before stay, unknown.
func TestNvidiaPacedAndFailure(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	fail := filepath.Join(dir, "fail")
	script := filepath.Join(dir, "nvidia-smi")
	mkfile(t, script, "#!/bin/sh\ncase \"$1\" in --query-compute-apps=*) exit 0;; esac\necho run >> "+runs+"\n[ -e "+fail+" ] && { echo 'driver gone' >&2; exit 9; }\necho '0, GPU-card, Card, 1000, 250, 750, 0'\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(t0)
	opts := fixture(t, "v2")
	opts.SysRoot = dir
	opts.Clock = clk
	opts.NvidiaSMI = script
	opts.GPUPeriod = 2 * time.Second
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	snap := func() []governor.GPU {
		t.Helper()
		s, err := p.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return s.GPUs
	}
	known := []governor.GPU{{ID: "nvidia:0", Name: "Card", Known: true, TotalBytes: 1000 * mib, FreeBytes: 750 * mib}}
	for range 3 {
		if g := snap(); !reflect.DeepEqual(g, known) {
			t.Fatalf("got %+v, want %+v", g, known)
		}
	}
	if n := countLines(t, runs); n != 1 {
		t.Fatalf("nvidia-smi ran %d times within one period, want 1", n)
	}
	clk.SetTime(t0.Add(1999 * time.Millisecond))
	snap()
	if n := countLines(t, runs); n != 1 {
		t.Fatalf("nvidia-smi ran %d times before the period ended, want 1", n)
	}
	mkfile(t, fail, "")
	clk.SetTime(t0.Add(2 * time.Second))
	unknown := []governor.GPU{{ID: "nvidia:0", Name: "Card"}}
	if g := snap(); !reflect.DeepEqual(g, unknown) {
		t.Fatalf("after failure: got %+v, want %+v", g, unknown)
	}
	if n := countLines(t, runs); n != 2 {
		t.Fatalf("nvidia-smi ran %d times, want 2", n)
	}
	if err := p.LastGPUError(); err == nil || !strings.Contains(err.Error(), "driver gone") {
		t.Fatalf("LastGPUError() = %v, want the tool's stderr", err)
	}
	if err := os.Remove(fail); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(4 * time.Second))
	if g := snap(); !reflect.DeepEqual(g, known) {
		t.Fatalf("after recovery: got %+v, want %+v", g, known)
	}
	if err := p.LastGPUError(); err != nil {
		t.Fatalf("LastGPUError() after recovery = %v, want nil", err)
	}
}

// TestSnapshotDoesNotShareGPUs: a caller mutating its snapshot does not
// change the next one.
func TestSnapshotDoesNotShareGPUs(t *testing.T) {
	p, s := mustSnapshot(t, fixture(t, "v1"))
	s.GPUs[0].FreeBytes = 1
	s2, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s2.GPUs[0].FreeBytes != 7*gib {
		t.Fatalf("second snapshot saw the caller's edit: %d", s2.GPUs[0].FreeBytes)
	}
}

// TestSnapshotRealMachine checks plausible values on the real /proc.
func TestSnapshotRealMachine(t *testing.T) {
	p, err := New(Options{ScratchDirs: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	mi := readMeminfo(t)
	if s.MemTotal <= 0 || s.MemTotal != mi["MemTotal"]*1024 {
		t.Errorf("MemTotal = %d, /proc/meminfo says %d kB", s.MemTotal, mi["MemTotal"])
	}
	if s.MemAvailable <= 0 || s.MemAvailable > s.MemTotal {
		t.Errorf("MemAvailable = %d, want in (0, %d]", s.MemAvailable, s.MemTotal)
	}
	if s.SwapTotal+s.ZramTotal != mi["SwapTotal"]*1024 {
		t.Errorf("swap %d + zram %d != SwapTotal %d kB", s.SwapTotal, s.ZramTotal, mi["SwapTotal"])
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	if want := cpusFromQuota(set.Count(), s.CPUQuota); s.CPUs != want || s.CPUs > runtime.NumCPU() {
		t.Errorf("CPUs = %d, want %d (affinity %d, quota %v, NumCPU %d)", s.CPUs, want, set.Count(), s.CPUQuota, runtime.NumCPU())
	}
	if s.Load1 < 0 || s.Load5 < 0 || s.Load15 < 0 {
		t.Errorf("negative load: %v %v %v", s.Load1, s.Load5, s.Load15)
	}
	_, psiErr := os.Stat("/proc/pressure/io")
	if s.PSI.Available != (psiErr == nil) {
		t.Errorf("PSI.Available = %v but /proc/pressure/io stat error is %v", s.PSI.Available, psiErr)
	}
	if s.CgroupMemoryLimit < 0 || (s.CgroupMemoryLimit == 0 && s.CgroupMemoryUsage != 0) {
		t.Errorf("cgroup limit %d usage %d", s.CgroupMemoryLimit, s.CgroupMemoryUsage)
	}
	if len(s.Scratch) != 1 || s.Scratch[0].FreeBytes <= 0 {
		t.Errorf("scratch = %+v, want one volume with free space", s.Scratch)
	}
	if time.Since(s.Taken) > time.Minute || s.Taken.After(time.Now()) {
		t.Errorf("Taken = %v, not now", s.Taken)
	}
	t.Logf("real snapshot: %+v", s)
}

func BenchmarkSnapshot(b *testing.B) {
	p, err := New(Options{ScratchDirs: []string{b.TempDir()}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
}

func mkfile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func readMeminfo(t *testing.T) map[string]int64 {
	t.Helper()
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err == nil {
			out[k] = n
		}
	}
	return out
}

// TestNvidiaWithoutSMI: with nvidia-smi absent from PATH, devices bound to
// the nvidia driver are reported present but unmeasurable.
func TestNvidiaWithoutSMI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	opts := fixture(t, "v1")
	opts.NvidiaSMI = ""
	p, s := mustSnapshot(t, opts)
	want := []governor.GPU{
		{ID: "nvidia:0", Name: "NVIDIA GPU 0000:01:00.0"},
		{ID: "nvidia:1", Name: "NVIDIA GPU 0000:02:00.0"},
		{ID: "amdgpu:0000:03:00.0", Name: "AMD Radeon RX 6600", Known: true, TotalBytes: 8 * gib, FreeBytes: 7 * gib},
	}
	if !reflect.DeepEqual(s.GPUs, want) {
		t.Fatalf("GPUs:\n got %+v\nwant %+v", s.GPUs, want)
	}
	if err := p.LastGPUError(); err == nil || !strings.Contains(err.Error(), "2 NVIDIA GPUs") {
		t.Fatalf("LastGPUError() = %v", err)
	}
}

// TestSnapshotConcurrent: Snapshot and LastGPUError may be called from many
// goroutines at once (run under -race); every snapshot is complete.
func TestSnapshotConcurrent(t *testing.T) {
	opts := fixture(t, "v1")
	opts.ScratchDirs = []string{"/scratch/hdd"}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for range 20 {
				s, err := p.Snapshot()
				if err == nil && (s.CgroupMemoryLimit != 2147483648 || len(s.GPUs) != 1 || len(s.Scratch) != 1 || !s.Scratch[0].Rotational) {
					err = errors.New("incomplete snapshot")
				}
				_ = p.LastGPUError()
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
