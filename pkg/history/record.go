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
	// Duration of the batch.
	Duration time.Duration `json:"duration"`
	// ExitCode of the command (-1 when killed); Reason why it ended when
	// not a plain exit.
	ExitCode int    `json:"exitCode"`
	Reason   string `json:"reason,omitempty"`
	// KilledForMemory is set when the batch was stopped for exceeding its
	// memory: its need was above what it had, a censored observation.
	KilledForMemory bool `json:"killedForMemory,omitempty"`
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

// Need is the memory the batch needed: its working set where measured,
// else its peak. This is what the model fits: page cache the kernel can
// reclaim is not a need.
func (r Record) Need() int64 {
	if r.WorkingSetBytes > 0 {
		return r.WorkingSetBytes
	}
	return r.PeakMemoryBytes
}
