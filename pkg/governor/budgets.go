package governor

import "time"

// BudgetState is one budget's numbers, in its unit (bytes, threads or slots).
// Free is never negative; Reserved may exceed Capacity−Margin after the
// capacity shrank (reservations are never revoked).
type BudgetState struct {
	Capacity, Margin, Reserved, Free int64
}

// GPUBudget is one GPU's state in the registry.
type GPUBudget struct {
	// ID and Name of the GPU.
	ID, Name string
	// Present is false for a GPU gone while reservations still refer to it.
	Present bool
	// Known is false when its memory cannot be measured.
	Known bool
	// Unified GPUs count their memory in the RAM budget; Memory is then zero.
	Unified bool
	// Memory is the dedicated VRAM budget.
	Memory BudgetState
	// Reservations on this GPU.
	Reservations int
}

// ScratchBudget is one scratch volume's state in the registry.
type ScratchBudget struct {
	// Path of the volume.
	Path string
	// Present is false for a volume gone while leases remain.
	Present bool
	// Rotational is true for spinning disks.
	Rotational bool
	// Unknown is true while its free space cannot be measured; Bytes then
	// holds the last measure.
	Unknown bool
	// Bytes: Capacity is the free space measured, Reserved the leases.
	Bytes BudgetState
	// Leases on this volume.
	Leases int
}

// BudgetsView is a consistent copy of the governor's state, for the CLI's
// budgets verb and metrics.
type BudgetsView struct {
	// Closed is true after Close; HaveSnapshot false before the first Update.
	Closed, HaveSnapshot bool
	// Generation of the hardware registry.
	Generation uint64
	// Taken is when the last snapshot was taken.
	Taken time.Time
	// Memory is the RAM budget: Capacity is min(MemTotal, cgroup limit,
	// configured capacity); Free follows doc.go's rule.
	Memory BudgetState
	// MemAvailable is the available memory used by the rule (bounded by the
	// cgroup); WorkMemoryUsage the snapshot's measure of our running work.
	MemAvailable, WorkMemoryUsage int64
	// Pressure is the memory used outside the batches and the pressure
	// it makes (pressure.go).
	Pressure MemoryPressure
	// CPU in threads: Capacity the usable CPUs, Margin those reserved.
	CPU BudgetState
	// IOSlots and GPUSlots.
	IOSlots, GPUSlots BudgetState
	// GPUs and Scratch volumes of the registries.
	GPUs    []GPUBudget
	Scratch []ScratchBudget
	// Reservations is the number of active reservations; NextID the id the
	// next one will get (ids below it were issued).
	Reservations int
	NextID       uint64
	// Load averages, the absolute load threshold and whether load defers
	// admissions now.
	Load1, Load5, Load15 float64
	LoadThreshold        float64
	LoadDeferred         bool
	// CPUGate: the CPU gate is on (neither LoadThreshold nor
	// CPUPressureThreshold is negative in the Config). CPUGateMaxWait
	// bounds its wait while no reservation is active (negative: none).
	CPUGate        bool
	CPUGateMaxWait time.Duration
	// CPUByPSI: the CPU deferral (LoadDeferred) follows PSI cpu some avg10
	// against CPUPressureThreshold (percent), not the load average.
	CPUByPSI             bool
	CPUPressureThreshold float64
	// CPUPressure is the value the CPU gate compares when CPUByPSI: the
	// pressure of the last second in which reservations left CPUs free.
	CPUPressure float64
	// PSI of the snapshot; IOPressureThreshold and whether IO pressure
	// defers admissions holding IO slots now.
	PSI                 PSI
	IOPressureThreshold float64
	IODeferred          bool
	// Swap and zram, reported and never counted as RAM.
	SwapTotal, SwapFree, ZramTotal, ZramFree int64
}

// Budgets returns a copy of the governor's budgets and signals.
func (g *Governor) Budgets() BudgetsView {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	s := &g.mu.snap
	v := BudgetsView{
		Closed: g.mu.closed, HaveSnapshot: g.mu.haveSnap,
		Generation: g.mu.generation, Taken: s.Taken,
		MemAvailable: g.mu.memAvailable, WorkMemoryUsage: s.WorkMemoryUsage, Pressure: g.mu.pressure.state,
		Memory: BudgetState{
			Capacity: g.mu.memCapacity, Margin: g.mu.memMargin,
			Reserved: g.mu.memReserved, Free: max(g.lockedMemFree(), 0),
		},
		Reservations: g.mu.active, NextID: g.mu.nextID,
		Load1: s.Load1, Load5: s.Load5, Load15: s.Load15,
		LoadThreshold: g.cfg.LoadThreshold * float64(g.mu.cpus), LoadDeferred: g.mu.load.check(now, g.cfg.Hysteresis),
		CPUGate: g.cfg.cpuGate(), CPUGateMaxWait: g.cfg.CPUGateMaxWait,
		CPUByPSI: g.mu.loadByPSI, CPUPressureThreshold: g.cfg.CPUPressureThreshold, CPUPressure: g.mu.cpuPSI.value,
		PSI: s.PSI, IOPressureThreshold: g.mu.io.threshold, IODeferred: g.mu.io.check(now, g.cfg.Hysteresis),
		SwapTotal: s.SwapTotal, SwapFree: s.SwapFree, ZramTotal: s.ZramTotal, ZramFree: s.ZramFree,
	}
	if !g.mu.haveSnap {
		v.Memory.Free = 0
	}
	threads := int64(g.mu.cpus - g.mu.cpusReserved)
	v.CPU = BudgetState{
		Capacity: int64(g.mu.cpus), Margin: int64(g.mu.cpusReserved),
		Reserved: int64(g.mu.threadsReserved), Free: max(threads-int64(g.mu.threadsReserved), 0),
	}
	v.IOSlots = BudgetState{
		Capacity: int64(g.cfg.IOSlots), Reserved: int64(g.mu.ioReserved),
		Free: int64(max(g.cfg.IOSlots-g.mu.ioReserved, 0)),
	}
	v.GPUSlots = BudgetState{
		Capacity: int64(g.mu.gpuSlots), Reserved: int64(g.mu.gpuSlotsReserved),
		Free: int64(max(g.mu.gpuSlots-g.mu.gpuSlotsReserved, 0)),
	}
	for i := range g.mu.gpus {
		x := &g.mu.gpus[i]
		if !x.present && x.refs == 0 {
			continue
		}
		b := GPUBudget{ID: x.id, Name: x.name, Present: x.present, Known: x.known, Unified: x.unified, Reservations: x.refs}
		if x.known && !x.unified {
			b.Memory = BudgetState{Capacity: x.total, Margin: x.margin, Reserved: x.reserved, Free: max(g.lockedGPUFree(i), 0)}
		}
		v.GPUs = append(v.GPUs, b)
	}
	for i := range g.mu.scratch {
		x := &g.mu.scratch[i]
		if !x.present && x.refs == 0 {
			continue
		}
		v.Scratch = append(v.Scratch, ScratchBudget{
			Path: x.path, Present: x.present, Rotational: x.rotational, Unknown: !x.known, Leases: x.refs,
			Bytes: BudgetState{Capacity: x.free, Reserved: x.reserved, Free: max(x.free-x.reserved, 0)},
		})
	}
	return v
}

// Memory returns the most RAM one reservation could ever be granted
// (capacity − margin) and the RAM free now (doc.go's rule, at least 0),
// without the copies Budgets makes. Both are 0 before the first snapshot
// and after Close.
func (g *Governor) Memory() (grantable, free int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed || !g.mu.haveSnap {
		return 0, 0
	}
	return max(g.mu.memCapacity-g.mu.memMargin, 0), max(g.lockedMemFree(), 0)
}
