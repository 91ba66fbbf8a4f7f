package history

import "time"

// Record is one finished batch of a profile, as the history keeps it.
type Record struct {
	// Time is when the batch ended.
	Time time.Time `json:"time"`
	// Task is the task's name (for people; the model ignores it).
	Task string `json:"task,omitempty"`
	// Items is the batch size; Threads the threads it ran with.
	Items   int64 `json:"items"`
	Threads int   `json:"threads"`
	// InputBytes is the total size of the batch's items that are files
	// (0 when none is).
	InputBytes int64 `json:"inputBytes,omitempty"`
	// PeakMemoryBytes is the batch's peak memory as measured.
	PeakMemoryBytes int64 `json:"peakMemoryBytes"`
	// WorkingSetBytes is the batch's peak working set (from its cgroup
	// once the runner reports it; until then the same as PeakMemoryBytes).
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
