package governor

import (
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// Bounds of the registries.
const (
	// MaxGPUs bounds the GPU registry; further GPUs of a snapshot are ignored.
	MaxGPUs = 16
	// MaxScratchVolumes bounds the scratch registry; further volumes are ignored.
	MaxScratchVolumes = 16
)

// Defaults applied by New when the corresponding Config field is zero.
const (
	// DefaultMinMemoryReserved is the smallest default system margin.
	DefaultMinMemoryReserved int64 = 512 << 20
	// DefaultMemoryReservedPercent of the capacity is the default system
	// margin when larger than DefaultMinMemoryReserved.
	DefaultMemoryReservedPercent = 5
	// DefaultMinGPUMemoryMargin is the smallest default VRAM margin per GPU.
	DefaultMinGPUMemoryMargin int64 = 256 << 20
	// DefaultIOSlots is the default number of heavy-IO slots.
	DefaultIOSlots = 2
	// DefaultLoadThreshold is the default load average per usable CPU above
	// which new admissions are deferred.
	DefaultLoadThreshold = 1.5
	// DefaultCPUPressureThreshold is the default PSI cpu "some avg10"
	// (percent) above which new admissions are deferred.
	DefaultCPUPressureThreshold = 60.0
	// DefaultIOPressureThreshold is the default PSI io "some avg10" (percent)
	// above which admissions holding IO slots are deferred.
	DefaultIOPressureThreshold = 40.0
	// DefaultHysteresis is how long a signal must stay below its threshold
	// before a deferral ends.
	DefaultHysteresis = 10 * time.Second
	// DefaultCPUGateMaxWait is the default bound on the CPU gate's wait
	// while none of the governor's reservations is active.
	DefaultCPUGateMaxWait = 30 * time.Second
)

// Config bounds the budgets. The zero value is usable: every zero field takes
// its documented default. A negative value means "none" (zero reserved,
// disabled) where a field's default is not zero.
type Config struct {
	// MemoryCapacity caps the RAM capacity below what the snapshot shows,
	// like Slurm's RealMemory (0: the detected total, bounded by the cgroup
	// limit).
	MemoryCapacity int64
	// MemoryReserved is the system margin kept free of reservations
	// (0: max(512Mi, 5% of the capacity); negative: none). It is clamped to
	// the capacity.
	MemoryReserved int64
	// CPUsReserved are logical CPUs kept for the system and the TUI
	// (0: none on machines with at most 2 CPUs, 1 above; negative: none).
	// At least one CPU always stays usable.
	CPUsReserved int
	// IOSlots is the number of concurrent heavy-IO slots (0: 2; negative: none).
	IOSlots int
	// GPUSlots is the number of concurrent GPU slots (0: one per GPU present;
	// negative: none).
	GPUSlots int
	// GPUMemoryMargin is the VRAM kept free on each dedicated GPU
	// (0: max(256Mi, 5% of its memory); negative: none).
	GPUMemoryMargin int64
	// GPUMemory declares the memory of GPUs no probe can measure: every GPU
	// of the snapshot reported unknown gets it as total and free, and when
	// the snapshot has no GPU at all a GPU named "config" is assumed
	// (0: no override).
	GPUMemory int64
	// GPUUnified declares every GPU unified-memory (its needs count in RAM).
	// With GPUMemory 0 and no GPU in the snapshot, it declares a unified GPU
	// named "config".
	GPUUnified bool
	// LoadThreshold is the 1-minute load average, less the threads of the
	// active reservations, per usable CPU above which new admissions wait
	// where the kernel has no PSI (0: 1.5; negative: the CPU gate is off,
	// CPU pressure included).
	LoadThreshold float64
	// CPUPressureThreshold is the PSI cpu "some avg10" percentage above
	// which new admissions wait, where the kernel has PSI (0: 60;
	// negative: the CPU gate is off, the load average included).
	CPUPressureThreshold float64
	// CPUGateMaxWait bounds how long the CPU gate (CPUPressure, LoadHigh)
	// holds back a demand while none of the governor's reservations is
	// active: counted on the injected clock from the first Reserve the
	// gate held back with none active, it lets the demand through once it
	// has passed, whatever the signal. A busy machine then slows
	// admissions and never starves them; while a reservation is active the
	// gate keeps holding new ones back (0: 30s; negative: no bound).
	CPUGateMaxWait time.Duration
	// IOPressureThreshold is the PSI io "some avg10" percentage above which
	// admissions holding IO slots wait (0: 40; negative: disabled).
	IOPressureThreshold float64
	// MemoryPressureSoft is the available memory under which new
	// admissions wait, memory pressure from outside the batches (0: the
	// system margin, max(512Mi, 5% of the capacity); negative: off).
	MemoryPressureSoft int64
	// MemoryPressureHard is the available memory under which one batch
	// yields (Pressure says PressureHard; 0: half the soft threshold;
	// negative: off).
	MemoryPressureHard int64
	// SwapFallRate is how fast, in bytes per second, swap and zram free
	// may fall before one batch yields (0: 64Mi/s; negative: off).
	SwapFallRate int64
	// Hysteresis is how long a deferring signal must stay at or below its
	// threshold before admissions resume (0: 10s; negative: none).
	Hysteresis time.Duration
}

// Option configures a Governor beyond its Config.
type Option func(*Governor)

// WithClock injects the clock used for grant times and hysteresis.
func WithClock(c clock.PassiveClock) Option {
	return func(g *Governor) { g.clock = c }
}

// DefaultLeasePrefix starts the name of every scratch lease directory when
// WithLeasePrefix is not given.
const DefaultLeasePrefix = "lardon3d-lease-"

// WithLeasePrefix sets how the directory of a scratch lease is named:
// VOLUME/PREFIX + the reservation id. The caller makes it unique across
// restarts (reservation ids restart at 1 with every governor), so that a new
// controller never reuses a leftover's name. A prefix holding a '/' or
// empty is ignored.
func WithLeasePrefix(prefix string) Option {
	return func(g *Governor) {
		if prefix != "" && !strings.ContainsRune(prefix, '/') {
			g.leasePrefix = prefix
		}
	}
}

// withDefaults returns c with every zero field set to its default, except the
// fields whose default depends on the snapshot (see the lockedX helpers).
func (c Config) withDefaults() Config {
	if c.IOSlots == 0 {
		c.IOSlots = DefaultIOSlots
	} else if c.IOSlots < 0 {
		c.IOSlots = 0
	}
	if c.LoadThreshold == 0 {
		c.LoadThreshold = DefaultLoadThreshold
	}
	if c.CPUPressureThreshold == 0 {
		c.CPUPressureThreshold = DefaultCPUPressureThreshold
	}
	if c.CPUGateMaxWait == 0 {
		c.CPUGateMaxWait = DefaultCPUGateMaxWait
	}
	if c.IOPressureThreshold == 0 {
		c.IOPressureThreshold = DefaultIOPressureThreshold
	}
	if c.Hysteresis == 0 {
		c.Hysteresis = DefaultHysteresis
	} else if c.Hysteresis < 0 {
		c.Hysteresis = 0
	}
	return c
}

// cpuGate reports whether the CPU gate is on: a negative LoadThreshold or
// CPUPressureThreshold turns it off.
func (c Config) cpuGate() bool { return c.LoadThreshold > 0 && c.CPUPressureThreshold > 0 }

// memoryMargin is the system margin for a capacity.
func (c Config) memoryMargin(capacity int64) int64 {
	m := c.MemoryReserved
	switch {
	case m < 0:
		m = 0
	case m == 0:
		m = max(DefaultMinMemoryReserved, capacity/100*DefaultMemoryReservedPercent)
	}
	return min(m, max(capacity, 0))
}

// cpusReserved is the number of CPUs kept for the system on a machine.
func (c Config) cpusReserved(cpus int) int {
	r := c.CPUsReserved
	switch {
	case r < 0:
		r = 0
	case r == 0 && cpus > 2:
		r = 1
	}
	return min(r, max(cpus-1, 0))
}

// gpuMargin is the VRAM margin of a GPU of the given size.
func (c Config) gpuMargin(total int64) int64 {
	m := c.GPUMemoryMargin
	switch {
	case m < 0:
		m = 0
	case m == 0:
		m = max(DefaultMinGPUMemoryMargin, total/100*5)
	}
	return min(m, max(total, 0))
}
