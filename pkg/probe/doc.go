// Package probe reads the machine and produces governor.Snapshot values: the
// dynamic state the governor is handed before each decision.
//
// What it owns: reading /proc (meminfo, loadavg, pressure, swaps, the
// controller's own cgroup membership), the cgroup v1 and v2 limit files, the
// CPU affinity mask, GPU memory (nvidia-smi for NVIDIA, amdgpu sysfs files for
// AMD) and the free space and rotational flag of scratch volumes. Every root
// is injectable (Options.ProcRoot, SysRoot, CgroupRoot), so tests run on the
// fixture trees under testdata/ as well as on the real machine. Each file the
// package parses itself has a pure parseX(io.Reader) function; meminfo,
// loadavg, PSI and swaps go through github.com/prometheus/procfs.
//
// TopProcesses (top.go) lists the processes with the largest resident
// memory, leaving out those carrying a given environment marker (the
// batches'), in a cgroup domain (MemoryDomain: the cgroup whose limit
// bounds the controller) or the whole machine, for an eviction to name
// what took the memory.
//
// What it must never do: decide anything. It does not know about estimates,
// reservations or margins, and it never writes a file. Missing optional
// sources are not errors: a kernel without PSI gives PSI.Available=false, no
// cgroup limit gives zero, no GPU tool gives no GPU. Only an unreadable
// meminfo or loadavg makes Snapshot fail.
//
// Cost: Snapshot is called before every admission, so it avoids re-reading
// static things. Cgroup discovery (which cgroup, which files) happens once in
// New; the limit files themselves are re-read each call because limits can
// change. GPU enumeration and measurement are refreshed at most every
// Options.GPUPeriod (exec of nvidia-smi costs milliseconds) and reused in
// between. Rotational flags are cached per device number.
//
// Heuristics:
//   - cgroup: a v1 "memory" (or "cpu") line in /proc/self/cgroup wins over the
//     v2 "0::" line (hybrid hosts mount the unified hierarchy without those
//     controllers). The limit is the smallest one found walking from the
//     controller's cgroup up to the hierarchy root; the usage reported is that
//     of the cgroup carrying the smallest limit. v1 values at or above 2^62
//     (such as 9223372036854771712) mean "no limit".
//   - AMD: a GPU whose mem_info_vram_total is at most 512 MiB and that exposes
//     mem_info_gtt_total is taken for an APU sharing system RAM: Unified is
//     set and the GTT sizes are reported as its memory.
//   - NVIDIA: nvidia-smi rather than NVML, which would need cgo and the
//     driver's library at build time in a static binary. Two queries per
//     refresh: the devices (index, uuid, name, memory total, used and free,
//     utilization) and the processes with a compute context on each
//     (gpu_uuid, pid, used_gpu_memory), joined by uuid; when only the
//     second fails the devices are still budgeted, and ProcessGPUMemory
//     says the processes' memory cannot be read.
//     Values "[N/A]" (or any bracketed value) make that GPU Known=false.
//     When nvidia-smi fails after having succeeded, the GPUs last seen are
//     reported with Known=false (present but unmeasurable), never dropped;
//     when it fails before any success (a driver still loading, a first run
//     that times out), the PCI devices bound to the nvidia driver are
//     reported, Known=false, as when the tool is absent. The governor then
//     answers WAIT (GPUUnknown), never REJECT (NoGPU), for a GPU that is
//     there but cannot be measured.
//   - Scratch: a directory measured once and that cannot be stat'ed now is
//     reported Unknown (present, free space unmeasurable, rotational flag
//     kept), never dropped, so that scratch demands wait rather than being
//     rejected; one never measured is left out.
//
// Per-process GPU memory: ProcessGPUMemory answers a batch's supervisor
// (pkg/runner, every 100 ms) from the last NVIDIA measurement, never
// waiting for nvidia-smi: a reading older than GPUPeriod starts one
// refresh in the background (at most one at a time) and the caller gets
// the last one. The measurement is what is allocated at that moment, not
// a peak: an allocation made and freed between two refreshes is not seen.
// Unknown is an error (ErrGPUGone, ErrGPUMemoryUnreadable), never a
// guess.
//
// Concurrency and lock order: a Prober is safe for concurrent use; one mutex
// (Prober.mu) serialises Snapshot calls and GPU refreshes and guards the
// caches; a second (Prober.gpuMem), taken after it and never before it,
// guards what ProcessGPUMemory reads. Snapshot can take as long as
// GPUTimeout (two nvidia-smi runs), so callers must not hold a lock of
// their own across it: in the controller only the prober goroutine
// (pkg/reconcile) calls it.
package probe
