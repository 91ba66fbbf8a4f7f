package reconcile

import (
	"path/filepath"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// StateDirName is the name of a spool's own state directory
// (SPOOL/.lardon3d), Config.StateDir's default: the one place it is
// spelled.
const StateDirName = ".lardon3d"

// DefaultQueuedWriteDelay is Config.QueuedWriteDelay's default.
const DefaultQueuedWriteDelay = 3 * time.Second

// Config tunes the controller.
type Config struct {
	// SpoolDir is the watched directory.
	SpoolDir string
	// StateDir holds logs and items files (default SpoolDir/.lardon3d).
	StateDir string
	// SpoolOwner, when set, is the user the spool directory must belong to
	// when its tasks' user is chosen (a spool a user asked the running
	// controller to serve): a directory swapped meanwhile is refused.
	SpoolOwner *uint32
	// ProgressInterval bounds how often progress alone is written per task
	// (default 250 ms). Phase changes wait at most PhaseWriteDelay.
	ProgressInterval time.Duration
	// PhaseWriteDelay is how long a phase change may wait for the events
	// that follow it, so that the Reserved→Running→Done of a short task lands
	// in one write (default 10 ms).
	PhaseWriteDelay time.Duration
	// QueuedWriteDelay is how long the first status of a new manifest
	// that is only queued (Pending, waiting for a worker at most) may wait
	// for its write (default 3 s): a task that starts meanwhile is written
	// once, with its phase change. These first writes then go out 64 at
	// once and 20 a second after that (queuedwrites.go), so that thousands
	// of short tasks dropped at once are not each written twice. Any
	// other reason to wait, and any phase change, is written as usual.
	QueuedWriteDelay time.Duration
	// ExitWhenDone makes Run return once every task is settled.
	ExitWhenDone bool
	// WaitForTasks, with ExitWhenDone, keeps Run going until at least this
	// many manifests were seen: a script may start the controller first
	// and drop its files after.
	WaitForTasks int
	// KillGrace is the SIGTERM→SIGKILL delay on cancel (default 10 s).
	KillGrace time.Duration
	// PidsMax bounds each batch's processes and threads (runner.Spec.PidsMax):
	// 0 means runner.DefaultPidsMax, < 0 no bound.
	PidsMax int64
	// LogMaxBytes caps each task's log (runner.Spec.LogMaxBytes): 0 means
	// runner.DefaultLogMaxBytes, < 0 no cap.
	LogMaxBytes int64
	// MemoryTolerance is how far a batch may exceed its memory contract
	// before it is killed (default 0.10).
	MemoryTolerance float64
	// Queue configures the queue.
	Queue queue.Config
	// PriorityClasses name the priorities a spec.priority may give by
	// name (machine-wide); DefaultPriority is a task's without one.
	PriorityClasses map[string]int64
	DefaultPriority int64
	// Account is who the spool's tasks are charged to for fair share and
	// quotas (per spool; default the spool directory's owner's name).
	Account string
	// ProbeInterval is how often the machine is probed (default 200 ms).
	ProbeInterval time.Duration
	// ProvisionalFraction is the share of the grantable memory the first
	// batch of a task with no estimate and no history reserves (default
	// 0.25), clamped to what is free; ProvisionalBytes, when > 0, is used
	// instead.
	ProvisionalFraction float64
	ProvisionalBytes    int64
	// BatchPolicy chooses among the batches that fit: BatchEfficient (the
	// default, "" included: each task's share of memory beside the tasks
	// ready to run (governor.Estimate.Peers), and, once a profile's
	// batches showed larger ones cost more per item, the largest batch
	// within 5 % of the least predicted time per item:
	// history.BatchCost.Cap) or BatchLargest (the largest that fits).
	BatchPolicy string
	// HistoryPath is the learned history's store, shared by every spool
	// of a Host (default: the first spool's STATE/history.db).
	HistoryPath string
	// CommitBeforeNextBatch makes a task's next batch wait until the
	// progress before it is committed in its status (the node agent sets
	// it: a node lost then loses at most its batches in flight). The spool
	// mode does not: a crash there re-runs at most the batches since the
	// last write, and waiting would cost every short batch a write.
	CommitBeforeNextBatch bool
}

// The batch policies.
const (
	BatchLargest   = "largest"
	BatchEfficient = "efficient"
)

// waitNumbersInterval bounds how often a waiting task's status is written
// when only the numbers of its reason's message changed.
const waitNumbersInterval = 10 * time.Second

// withDefaults fills the unset fields of cfg.
func (cfg Config) withDefaults() Config {
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(cfg.SpoolDir, StateDirName)
	}
	if abs, err := filepath.Abs(cfg.StateDir); err == nil {
		cfg.StateDir = abs // it marks the batches' environment: one spelling
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 250 * time.Millisecond
	}
	if cfg.PhaseWriteDelay <= 0 {
		cfg.PhaseWriteDelay = 10 * time.Millisecond
	}
	if cfg.QueuedWriteDelay <= 0 {
		cfg.QueuedWriteDelay = DefaultQueuedWriteDelay
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = 10 * time.Second
	}
	if cfg.PidsMax == 0 {
		cfg.PidsMax = runner.DefaultPidsMax
	}
	if cfg.LogMaxBytes == 0 {
		cfg.LogMaxBytes = runner.DefaultLogMaxBytes
	}
	if cfg.MemoryTolerance <= 0 {
		cfg.MemoryTolerance = 0.10
	}
	if cfg.ProvisionalFraction <= 0 || cfg.ProvisionalFraction > 1 {
		cfg.ProvisionalFraction = DefaultProvisionalFraction
	}
	return cfg
}
