package governor

import "time"

// Estimate is a task's resource demand (Lardon3DResourceEstimate). The
// governor never modifies it. All byte amounts are in bytes.
type Estimate struct {
	// Class keys the per-class batch history (features, matching, ...).
	Class string
	// FixedMemory is paid once per batch.
	FixedMemory int64
	// PerItemMemory is paid per item of the batch.
	PerItemMemory int64
	// PerThreadMemory is paid per thread granted.
	PerThreadMemory int64
	// FixedGPUMemory is paid once per batch on the GPU.
	FixedGPUMemory int64
	// PerItemGPUMemory is paid per item on the GPU.
	PerItemGPUMemory int64
	// BatchMin is the smallest useful batch (>= 1).
	BatchMin int64
	// BatchMax is the largest batch wished (>= BatchMin).
	BatchMax int64
	// ItemsLeft is how many items the task has left (0: not said). A batch
	// smaller than that is evened out: the items left run in as many
	// batches as the largest batch that fits would take, of equal sizes
	// (64 items where 62 fit run as 32 + 32, not 62 + 2).
	ItemsLeft int64
	// Peers is how many tasks, this one included, could run a batch side
	// by side now: those holding one and those queued ready to (0 or 1:
	// this one alone). With k = min(Peers, the CPU slots at MinThreads)
	// above 1, a batch whose memory would leave the others less than
	// their share is held to its own, 1/k of the grantable memory (and
	// evened out): k batches side by side end the queued work sooner than
	// one large batch beside idle CPUs. BatchTime and ItemTime weigh that
	// when known: a batch's fixed time paid more often may cost more than
	// the CPUs gain, and then the share does not apply. Tasks with a GPU
	// demand are never held to a share.
	Peers int
	// BatchTime and ItemTime are the learned duration of a batch,
	// BatchTime + ItemTime·items (both 0: unknown).
	BatchTime, ItemTime time.Duration
	// Threads is the number of threads wished (>= 1).
	Threads int
	// MinThreads is the fewest threads acceptable (1 <= MinThreads <= Threads).
	MinThreads int
	// IOSlots is the number of heavy-IO slots held.
	IOSlots int
	// GPUSlots is the number of GPU slots held.
	GPUSlots int
	// ScratchBytes is the scratch lease needed (0: none).
	ScratchBytes int64
	// Continues says the estimate asks for the next batch of a task whose
	// work is under way (it ran a batch and holds its place between two):
	// not a new admission. The deferrals (the CPU gate, IO pressure) hold
	// new admissions only and never this one; every budget still applies.
	Continues bool
}

// CappedAt returns e with its batch bounds within n items: BatchMax at most
// n (and n when unset), BatchMin at most BatchMax. It is the one place a
// batch range is clamped, for a task's item count and for the items left.
func (e Estimate) CappedAt(n int64) Estimate {
	if e.BatchMax <= 0 || e.BatchMax > n {
		e.BatchMax = n
	}
	if e.BatchMin > e.BatchMax {
		e.BatchMin = e.BatchMax
	}
	return e
}

// NeedsGPU reports whether the estimate asks for any GPU resource.
func (e Estimate) NeedsGPU() bool {
	return e.FixedGPUMemory > 0 || e.PerItemGPUMemory > 0 || e.GPUSlots > 0
}

// Snapshot is the machine's dynamic state, taken by a probe and handed to the
// governor. Byte amounts are in bytes; zero means "none" where documented.
type Snapshot struct {
	// Taken is when the snapshot was taken.
	Taken time.Time
	// MemTotal is physical memory (MemTotal of /proc/meminfo).
	MemTotal int64
	// MemAvailable is MemAvailable of /proc/meminfo.
	MemAvailable int64
	// CgroupMemoryLimit is the memory limit of the controller's cgroup (0: none).
	CgroupMemoryLimit int64
	// CgroupMemoryUsage is the cgroup's current usage (0 when no limit).
	CgroupMemoryUsage int64
	// WorkMemoryUsage is the resident memory of the controller's own running
	// batches when the caller measures it (0: unknown or none). It lets the
	// governor avoid counting running reservations twice; see doc.go.
	WorkMemoryUsage int64
	// SwapTotal and SwapFree cover every swap device except zram.
	SwapTotal, SwapFree int64
	// ZramTotal and ZramFree cover zram swap devices.
	ZramTotal, ZramFree int64
	// CPUs is the number of logical CPUs usable: the affinity mask, bounded
	// by the cgroup CPU quota (rounded up).
	CPUs int
	// CPUQuota is the cgroup CPU quota in cores (0: none).
	CPUQuota float64
	// Load1, Load5, Load15 are the load averages.
	Load1, Load5, Load15 float64
	// PSI holds pressure stall information; absent on some kernels.
	PSI PSI
	// GPUs seen on the machine.
	GPUs []GPU
	// Scratch volumes usable for scratch leases.
	Scratch []ScratchVolume
}

// PSI is pressure stall information for cpu, io and memory.
type PSI struct {
	// Available is false when the kernel exposes no PSI (not an error).
	Available bool
	// CPU, IO and Memory pressure.
	CPU, IO, Memory Pressure
}

// Pressure is one resource's PSI line pair, in percent.
type Pressure struct {
	// SomeAvg10 and SomeAvg60: share of time some task stalled.
	SomeAvg10, SomeAvg60 float64
	// FullAvg10 and FullAvg60: share of time all tasks stalled.
	FullAvg10, FullAvg60 float64
	// SomeTotal is the cumulative time some task stalled, in microseconds
	// (0: unknown); the governor derives the recent CPU pressure from it.
	SomeTotal uint64
}

// GPU is one GPU and its memory.
type GPU struct {
	// ID is a stable identifier (index or PCI address).
	ID string
	// Name is the product name.
	Name string
	// Known is false when the GPU is present but its memory cannot be measured.
	Known bool
	// TotalBytes and FreeBytes of its memory (valid when Known).
	TotalBytes, FreeBytes int64
	// Unified is true when the GPU shares system RAM (integrated GPUs, Apple-like SoCs).
	Unified bool
}

// ScratchVolume is a disk area usable for scratch leases.
type ScratchVolume struct {
	// Path is the directory under which leases are made.
	Path string
	// FreeBytes available on the volume.
	FreeBytes int64
	// Rotational is true for spinning disks.
	Rotational bool
	// Unknown is true for a volume seen before whose free space cannot be
	// measured now (its directory could not be stat'ed): present, but no
	// lease is granted on it until it is measured again, and scratch demands
	// wait (ScratchUnknown) rather than being rejected.
	Unknown bool
}

// Verdict is the governor's answer to an estimate.
type Verdict int

// The verdicts of the seed.
const (
	// Admit: the demand fits as asked (batch BatchMax, Threads).
	Admit Verdict = iota + 1
	// ReduceBatch: the demand fits with a smaller batch or fewer threads.
	ReduceBatch
	// Wait: a temporary shortage; ask again later.
	Wait
	// Reject: the demand can never fit this machine.
	Reject
)

// String returns ADMIT, REDUCE_BATCH, WAIT or REJECT.
func (v Verdict) String() string {
	switch v {
	case Admit:
		return "ADMIT"
	case ReduceBatch:
		return "REDUCE_BATCH"
	case Wait:
		return "WAIT"
	case Reject:
		return "REJECT"
	}
	return "UNKNOWN"
}

// Reason is the machine-readable cause of a decision; a closed set.
type Reason string

// The reasons. Fits is the reason of Admit.
const (
	ReasonFits                  Reason = "Fits"
	ReasonBatchReduced          Reason = "BatchReduced"
	ReasonInsufficientMemory    Reason = "InsufficientMemory"
	ReasonInsufficientGPUMemory Reason = "InsufficientGPUMemory"
	ReasonGPUUnknown            Reason = "GPUUnknown"
	ReasonNoGPU                 Reason = "NoGPU"
	ReasonNoFreeCPU             Reason = "NoFreeCPU"
	ReasonLoadHigh              Reason = "LoadHigh"
	ReasonCPUPressure           Reason = "CPUPressure"
	ReasonIOPressure            Reason = "IOPressure"
	ReasonNoIOSlot              Reason = "NoIOSlot"
	ReasonNoGPUSlot             Reason = "NoGPUSlot"
	ReasonNoScratch             Reason = "NoScratch"
	ReasonScratchUnknown        Reason = "ScratchUnknown"
	ReasonExceedsCapacity       Reason = "ExceedsCapacity"
	ReasonInvalidEstimate       Reason = "InvalidEstimate"
	ReasonNoSnapshot            Reason = "NoSnapshot"
	ReasonClosed                Reason = "Closed"
)

// Budget names a budget a decision can run short of.
type Budget string

// The budgets.
const (
	BudgetNone      Budget = ""
	BudgetMemory    Budget = "memory"
	BudgetGPUMemory Budget = "gpuMemory"
	BudgetCPU       Budget = "cpu"
	BudgetIOSlots   Budget = "ioSlots"
	BudgetGPUSlots  Budget = "gpuSlots"
	BudgetScratch   Budget = "scratch"
	BudgetLoad      Budget = "load"
	BudgetIOPSI     Budget = "ioPressure"
	BudgetCPUPSI    Budget = "cpuPressure"
)

// Contract is the public, immutable snapshot of a reservation: exactly what
// the worker may use.
type Contract struct {
	// Batch granted and BatchRequested (the estimate's BatchMax).
	Batch, BatchRequested int64
	// ItemsLeft echoes the estimate's: the items the task had left.
	ItemsLeft int64
	// Share is k when the batch was held to a 1/k share of the memory,
	// k batches side by side (Estimate.Peers); 0 otherwise.
	Share int
	// Threads granted.
	Threads int
	// MemoryBytes reserved from the RAM budget (includes unified GPU memory).
	MemoryBytes int64
	// GPUMemoryBytes reserved from dedicated VRAM.
	GPUMemoryBytes int64
	// GPUID is the GPU the VRAM is reserved on ("" for none).
	GPUID string
	// IOSlots and GPUSlots held.
	IOSlots, GPUSlots int
	// ScratchBytes leased, on ScratchDir.
	ScratchBytes int64
	// ScratchDir is the leased directory ("" for none).
	ScratchDir string
	// Generation of the governor when granted.
	Generation uint64
	// GrantedAt is when it was granted (the governor's clock).
	GrantedAt time.Time
}
