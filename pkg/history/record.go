package history

import "time"

// Record is one finished batch of a profile, as the history keeps it.
type Record struct {
	// Time is when the batch ended.
	Time time.Time `json:"time"`
	// Task is the task's name (for people; the model ignores it).
	Task string `json:"task,omitempty"`
	// Batch is the batch's index within its task's generation, from 0;
	// Generation the task's generation and Attempt the try of this batch
	// (1 for the first). For accounting (the batches verb); the model
	// ignores them. Records written before they existed hold zeros.
	Batch      int64 `json:"batch"`
	Generation int64 `json:"generation,omitempty"`
	Attempt    int   `json:"attempt,omitempty"`
	// Items is the batch size; Threads the threads it ran with.
	Items   int64 `json:"items"`
	Threads int   `json:"threads"`
	// InputBytes is the total size of the batch's items that are files
	// (0 when none is).
	InputBytes int64 `json:"inputBytes,omitempty"`
	// PeakMemoryBytes is the batch's peak memory as measured: its cgroup's
	// peak charge (page cache included), or the sampled RSS sum.
	PeakMemoryBytes int64 `json:"peakMemoryBytes"`
	// WorkingSetBytes is the batch's need: its cgroup's peak working set
	// (page cache it only read excluded); the same as PeakMemoryBytes
	// where no cgroup measured it.
	WorkingSetBytes int64 `json:"workingSetBytes,omitempty"`
	// LimitBytes is the memory the batch's contract reserved.
	LimitBytes int64 `json:"limitBytes,omitempty"`
	// DeclaredBytes is what the task's stated costs gave the batch's
	// memory (0: none stated, or a record from before it was kept);
	// LimitBytes may be more (a raise, a retry after a kill).
	// DeclaredGPUBytes is the same for GPU memory.
	DeclaredBytes    int64 `json:"declaredBytes,omitempty"`
	DeclaredGPUBytes int64 `json:"declaredGPUBytes,omitempty"`
	// Duration of the batch.
	Duration time.Duration `json:"duration"`
	// ExitCode of the command (-1 when killed); Reason why it ended when
	// not a plain exit.
	ExitCode int    `json:"exitCode"`
	Reason   string `json:"reason,omitempty"`
	// KilledForMemory is set when the batch was stopped for exceeding its
	// memory: its need was above what it had, a censored observation.
	KilledForMemory bool `json:"killedForMemory,omitempty"`
	// GPUMemoryBytes is the highest GPU memory the batch's processes were
	// measured using (valid when GPUMeasured), GPULimitBytes the GPU
	// memory its contract reserved, and KilledForGPUMemory is set when it
	// was stopped for exceeding it (a censored observation of its GPU
	// need). GPURecords turns them into records of their own.
	GPUMemoryBytes     int64 `json:"gpuMemoryBytes,omitempty"`
	GPUMeasured        bool  `json:"gpuMeasured,omitempty"`
	GPULimitBytes      int64 `json:"gpuLimitBytes,omitempty"`
	KilledForGPUMemory bool  `json:"killedForGPUMemory,omitempty"`
}

// GPURecords are the records of the batches that reserved GPU memory, as
// records of their GPU memory, for Fit: the GPU peak as the peak, the GPU
// reservation as the limit, a GPU memory kill as a memory kill. A batch
// that ended otherwise than by a plain exit or a GPU memory kill (its
// memory killed, a timeout) is neither a sample nor a censor; one whose
// GPU memory no reading measured is left out.
func GPURecords(recs []Record) []Record {
	var out []Record
	for _, r := range recs {
		if r.GPULimitBytes <= 0 || (!r.GPUMeasured && !r.KilledForGPUMemory) {
			continue
		}
		g := Record{
			Time: r.Time, Task: r.Task, Batch: r.Batch, Generation: r.Generation, Attempt: r.Attempt,
			Items: r.Items, Threads: r.Threads, Duration: r.Duration,
			PeakMemoryBytes: r.GPUMemoryBytes, LimitBytes: r.GPULimitBytes, DeclaredBytes: r.DeclaredGPUBytes,
			ExitCode: r.ExitCode, Reason: r.Reason, KilledForMemory: r.KilledForGPUMemory,
		}
		if r.KilledForGPUMemory {
			g.Reason = ""
		}
		out = append(out, g)
	}
	return out
}

// Succeeded reports whether the batch exited 0 with a measured peak: an
// observation of its need.
func (r Record) Succeeded() bool {
	return r.ExitCode == 0 && r.Reason == "" && !r.KilledForMemory && r.PeakMemoryBytes > 0 && r.Items > 0
}

// CensorBytes is what a batch killed for memory is known to have needed
// more than: the larger of its measured peak and its reserved memory.
func (r Record) CensorBytes() int64 {
	return max(r.PeakMemoryBytes, r.LimitBytes)
}

// declared is what the stated costs gave the batch: DeclaredBytes, or,
// in a record from before it was kept, the reservation.
func (r Record) declared() int64 {
	if r.DeclaredBytes > 0 {
		return r.DeclaredBytes
	}
	return r.LimitBytes
}

// Need is the memory the batch needed: its working set where measured,
// else its peak. This is what the model fits: page cache the kernel can
// reclaim is not a need.
func (r Record) Need() int64 {
	if r.WorkingSetBytes > 0 {
		return r.WorkingSetBytes
	}
	return r.PeakMemoryBytes
}
