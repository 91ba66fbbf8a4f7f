package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// NvidiaSMIOff disables the NVIDIA probe when given as Options.NvidiaSMI.
const NvidiaSMIOff = "off"

// Defaults of Options.
const (
	DefaultProcRoot   = "/proc"
	DefaultSysRoot    = "/sys"
	DefaultCgroupRoot = "/sys/fs/cgroup"
	DefaultGPUPeriod  = 2 * time.Second
	DefaultGPUTimeout = 5 * time.Second
)

// Options configure a Prober. The zero value probes the real machine.
type Options struct {
	// ProcRoot is the proc mount (default /proc).
	ProcRoot string
	// SysRoot is the sysfs mount (default /sys).
	SysRoot string
	// CgroupRoot is the cgroup mount (default /sys/fs/cgroup).
	CgroupRoot string
	// NvidiaSMI is the nvidia-smi binary: "" looks it up on PATH once in New
	// (when it is absent, PCI devices bound to the nvidia driver are reported
	// as GPUs of unknown memory); NvidiaSMIOff disables the NVIDIA probe.
	NvidiaSMI string
	// ScratchDirs are the directories reported as scratch volumes. A
	// directory that cannot be stat'ed is left out of the snapshot until it
	// was measured once; after that it is reported Unknown (present, free
	// space unmeasurable), never dropped.
	ScratchDirs []string
	// Clock stamps snapshots and paces GPU refreshes (default: the real clock).
	Clock clock.PassiveClock
	// GPUPeriod is the least time between two GPU measurements; in between
	// the last one is reused (default 2s).
	GPUPeriod time.Duration
	// GPUTimeout bounds one refresh, both nvidia-smi queries (default
	// 5s). It runs inside Snapshot, or in the background for
	// ProcessGPUMemory, under the Prober's mutex.
	GPUTimeout time.Duration
	// Affinity returns the number of CPUs in the process's affinity mask
	// (default: sched_getaffinity). Injectable for fixture tests.
	Affinity func() (int, error)
	// StatVolume measures a scratch directory (default: statfs and stat).
	// Injectable for fixture tests.
	StatVolume func(path string) (VolumeStat, error)
}

// Prober takes snapshots of the machine. It is safe for concurrent use.
type Prober struct {
	opts   Options
	proc   procfs.FS
	cg     cgroupPaths
	nvidia string // resolved nvidia-smi path, "" when disabled or absent
	// nvidiaFallback: nvidia-smi was looked up and not found; GPUs bound
	// to the nvidia driver are then reported unmeasurable.
	nvidiaFallback bool

	mu struct {
		sync.Mutex
		// gpus is the last GPU measurement, taken at gpuAt; gpuValid is
		// false before the first one.
		gpus     []governor.GPU
		gpuAt    time.Time
		gpuValid bool
		// gpuErr is the last GPU probe error (nil after a success).
		gpuErr error
		// nvidiaSeen are the NVIDIA GPUs of the last successful run.
		nvidiaSeen []governor.GPU
		// rotational caches the rotational flag per device number.
		rotational map[uint64]bool
		// scratchSeen is the last measure of each scratch directory that was
		// measured at least once.
		scratchSeen map[string]governor.ScratchVolume
	}
	// gpuMem is the last NVIDIA measurement as ProcessGPUMemory reads it.
	// Its own lock, never held across nvidia-smi: a batch's supervisor
	// never waits on the tool. Taken after mu (lockedGPUs), never before.
	gpuMem struct {
		sync.Mutex
		// devices are those of the last successful device query, their
		// processes as the compute processes query gave them (appsErr: it
		// failed).
		devices []GPUDevice
		appsErr error
		// err is the last refresh's failure (nil after a success); at is
		// when the last refresh began, valid once one ended.
		err   error
		at    time.Time
		valid bool
		// refreshing: a refresh started by ProcessGPUMemory is running.
		refreshing bool
	}
}

// Errors of ProcessGPUMemory.
var (
	// ErrGPUGone: the GPU is not among those the last measurement found
	// (it disappeared, or never was).
	ErrGPUGone = errors.New("GPU not present")
	// ErrGPUMemoryUnreadable: the GPU's memory, or that of a process on
	// it, could not be read (nvidia-smi failing or timing out, "[N/A]",
	// no nvidia-smi, no measurement yet, not an NVIDIA GPU).
	ErrGPUMemoryUnreadable = errors.New("GPU memory cannot be read")
)

// New returns a Prober. Cgroup membership is read once here; a missing
// ProcRoot is an error, a missing cgroup or GPU tool is not.
func New(opts Options) (*Prober, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = DefaultProcRoot
	}
	if opts.SysRoot == "" {
		opts.SysRoot = DefaultSysRoot
	}
	if opts.CgroupRoot == "" {
		opts.CgroupRoot = DefaultCgroupRoot
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.GPUPeriod <= 0 {
		opts.GPUPeriod = DefaultGPUPeriod
	}
	if opts.GPUTimeout <= 0 {
		opts.GPUTimeout = DefaultGPUTimeout
	}
	if opts.Affinity == nil {
		opts.Affinity = schedAffinity
	}
	if opts.StatVolume == nil {
		opts.StatVolume = statVolume
	}
	opts.ScratchDirs = slices.Clone(opts.ScratchDirs)

	fsys, err := procfs.NewFS(opts.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("open proc root %s: %w", opts.ProcRoot, err)
	}
	p := &Prober{opts: opts, proc: fsys}
	p.mu.rotational = make(map[uint64]bool)
	p.mu.scratchSeen = make(map[string]governor.ScratchVolume)

	raw, err := os.ReadFile(filepath.Join(opts.ProcRoot, "self", "cgroup"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read cgroup membership: %w", err)
	default:
		entries, err := parseProcCgroup(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		p.cg = discoverCgroups(entries, opts.CgroupRoot)
	}

	switch opts.NvidiaSMI {
	case NvidiaSMIOff:
	case "":
		if path, err := exec.LookPath("nvidia-smi"); err == nil {
			p.nvidia = path
		} else {
			p.nvidiaFallback = true
		}
	default:
		p.nvidia = opts.NvidiaSMI
	}
	return p, nil
}

// Snapshot reads the machine now. It fails only when meminfo or loadavg
// cannot be read or a present file cannot be parsed.
func (p *Prober) Snapshot() (governor.Snapshot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opts.Clock.Now()
	s := governor.Snapshot{Taken: now}

	var err error
	if s.MemTotal, s.MemAvailable, err = memInfo(p.proc); err != nil {
		return governor.Snapshot{}, err
	}
	la, err := p.proc.LoadAvg()
	if err != nil {
		return governor.Snapshot{}, fmt.Errorf("read loadavg: %w", err)
	}
	s.Load1, s.Load5, s.Load15 = la.Load1, la.Load5, la.Load15

	switch psi, err := readPSI(p.proc); {
	case errors.Is(err, errPSIUnavailable):
	case err != nil:
		return governor.Snapshot{}, err
	default:
		s.PSI = psi
	}

	swaps, err := p.proc.Swaps()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return governor.Snapshot{}, fmt.Errorf("read swaps: %w", err)
	}
	t := splitSwaps(swaps)
	s.SwapTotal, s.SwapFree, s.ZramTotal, s.ZramFree = t.Total, t.Free, t.ZramTotal, t.ZramFree

	if s.CgroupMemoryLimit, s.CgroupMemoryUsage, err = cgroupMemory(p.cg.memVersion, p.cg.memDirs); err != nil {
		return governor.Snapshot{}, fmt.Errorf("read cgroup memory: %w", err)
	}
	if s.CPUQuota, err = cgroupCPUQuota(p.cg.cpuVersion, p.cg.cpuDirs); err != nil {
		return governor.Snapshot{}, fmt.Errorf("read cgroup cpu quota: %w", err)
	}
	aff, err := p.opts.Affinity()
	if err != nil {
		return governor.Snapshot{}, fmt.Errorf("read cpu affinity: %w", err)
	}
	s.CPUs = cpusFromQuota(aff, s.CPUQuota)

	s.GPUs = p.lockedGPUs(now)
	s.Scratch = p.lockedScratch()
	return s, nil
}

// LastGPUError returns the error of the last GPU measurement, nil after a
// success. GPU errors never fail Snapshot.
func (p *Prober) LastGPUError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.gpuErr
}

// CgroupVersion returns the cgroup layout found for memory and for cpu:
// "v1", "v2" or "none".
func (p *Prober) CgroupVersion() (memory, cpu string) {
	return p.cg.memVersion.String(), p.cg.cpuVersion.String()
}

// lockedGPUs returns the GPUs, measuring again when the last measurement is
// older than GPUPeriod.
// REQUIRES: p.mu held.
func (p *Prober) lockedGPUs(now time.Time) []governor.GPU {
	if !p.mu.gpuValid || now.Sub(p.mu.gpuAt) >= p.opts.GPUPeriod || now.Before(p.mu.gpuAt) {
		var gpus []governor.GPU
		p.mu.gpuErr = nil
		if p.nvidiaFallback {
			if nv := nvidiaBound(p.opts.SysRoot); len(nv) > 0 {
				p.mu.gpuErr = fmt.Errorf("nvidia-smi not found on PATH: %d NVIDIA GPUs cannot be measured", len(nv))
				gpus = append(gpus, nv...)
			}
		}
		if p.nvidia != "" {
			nv, appsErr, err := runNvidiaSMI(context.Background(), p.nvidia, p.opts.GPUTimeout)
			if err != nil {
				p.mu.gpuErr = err
				// Present before, unmeasurable now: keep them, unknown. Never
				// measured yet (a first run that failed or timed out): the
				// devices bound to the nvidia driver stand for them, unknown.
				seen := p.mu.nvidiaSeen
				if len(seen) == 0 {
					seen = nvidiaBound(p.opts.SysRoot)
				}
				for _, g := range seen {
					gpus = append(gpus, governor.GPU{ID: g.ID, Name: g.Name})
				}
			} else {
				seen := make([]governor.GPU, 0, len(nv))
				for _, d := range nv {
					seen = append(seen, d.budgetGPU())
				}
				p.mu.nvidiaSeen = seen
				gpus = append(gpus, seen...)
			}
			p.noteGPUMemory(now, nv, appsErr, err)
		} else if p.nvidiaFallback {
			p.noteGPUMemory(now, nil, nil, errors.New("nvidia-smi not found on PATH"))
		}
		gpus = append(gpus, amdGPUs(p.opts.SysRoot)...)
		p.mu.gpus, p.mu.gpuAt, p.mu.gpuValid = gpus, now, true
	}
	return slices.Clone(p.mu.gpus)
}

// lockedScratch measures the scratch directories.
// REQUIRES: p.mu held.
func (p *Prober) lockedScratch() []governor.ScratchVolume {
	if len(p.opts.ScratchDirs) == 0 {
		return nil
	}
	out := make([]governor.ScratchVolume, 0, len(p.opts.ScratchDirs))
	for _, dir := range p.opts.ScratchDirs {
		st, err := p.opts.StatVolume(dir)
		if err != nil {
			if last, seen := p.mu.scratchSeen[dir]; seen {
				// Measured before, not now: present, of unknown free space.
				out = append(out, governor.ScratchVolume{Path: dir, Rotational: last.Rotational, Unknown: true})
			}
			continue // never measured: not a volume yet
		}
		rot, ok := p.mu.rotational[st.Dev]
		if !ok {
			rot = rotational(p.opts.SysRoot, st.Dev)
			p.mu.rotational[st.Dev] = rot
		}
		v := governor.ScratchVolume{Path: dir, FreeBytes: st.FreeBytes, Rotational: rot}
		p.mu.scratchSeen[dir] = v
		out = append(out, v)
	}
	return out
}

// schedAffinity counts the CPUs of the calling thread's affinity mask.
func schedAffinity() (int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, fmt.Errorf("sched_getaffinity: %w", err)
	}
	return set.Count(), nil
}
