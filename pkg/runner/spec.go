package runner

import (
	"errors"
	"fmt"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
)

// Defaults applied by Start to the zero values of a Spec.
const (
	// DefaultMemoryTolerance is how far above its contract a batch may go
	// before it is killed (10%).
	DefaultMemoryTolerance = 0.10
	// DefaultKillGrace is the time between SIGTERM and SIGKILL.
	DefaultKillGrace = 10 * time.Second
	// DefaultSampleInterval is the memory sampling period.
	DefaultSampleInterval = 100 * time.Millisecond
)

// Reasons a batch ended other than by a plain exit of its command.
const (
	// ReasonMemoryExceeded: the kernel killed a process of the batch's
	// cgroup at its limit (the contract plus the tolerance), or, without a
	// cgroup, the group's sampled resident memory went past that limit; the
	// whole batch was killed.
	ReasonMemoryExceeded = v1alpha1.ReasonMemoryExceeded
	// ReasonBatchTimeout: the batch ran longer than Spec.Timeout.
	ReasonBatchTimeout = v1alpha1.ReasonBatchTimeout
	// ReasonGPUMemoryExceeded: the batch's processes were measured using
	// more memory on its GPU than the contract plus the tolerance; the
	// whole batch was killed.
	ReasonGPUMemoryExceeded = v1alpha1.ReasonGPUMemoryExceeded
	// ReasonCancelled: Cancel was called or the context of Start ended.
	ReasonCancelled = "Cancelled"
)

// Errors returned by this package.
var (
	// ErrCommandNotFound: the command is not in PATH, does not exist or is
	// not executable. Start wraps it with the details.
	ErrCommandNotFound = errors.New("command not found")
	// ErrInvalidSpec: the Spec cannot be run as given (empty command, no log
	// path, bad env name).
	ErrInvalidSpec = errors.New("invalid batch spec")
	// ErrBatchEnded: Pause or Resume was called on a batch that has ended.
	ErrBatchEnded = errors.New("batch has ended")
	// ErrPauseTimeout: some process of the group did not reach the stopped
	// state in time.
	ErrPauseTimeout = errors.New("group did not stop in time")
	// ErrLeftoverSurvived: KillLeftover sent SIGKILL but processes of the
	// group were still alive when it gave up waiting.
	ErrLeftoverSurvived = errors.New("leftover processes survived SIGKILL")
)

// PrepareError is a failure to make what a batch needs before its command
// runs (the run directory, the items file, the log, the cgroup) for a
// reason that may pass: a full, read-only or missing state directory. The
// caller tries again later (Transient); nothing of the command ran.
type PrepareError struct{ Err error }

// NewPrepareError wraps err as a PrepareError; nil stays nil.
func NewPrepareError(err error) error {
	if err == nil {
		return nil
	}
	return &PrepareError{Err: err}
}

func (e *PrepareError) Error() string { return e.Err.Error() }
func (e *PrepareError) Unwrap() error { return e.Err }

// Transient reports that the failure may pass: always true.
func (e *PrepareError) Transient() bool { return true }

// EnvVar is one environment variable given to the command. Value may
// reference other variables as $(NAME).
type EnvVar struct {
	Name, Value string
}

// Spec is one batch to run. Zero durations and tolerance take the package
// defaults.
type Spec struct {
	// Task is the task's name (LARDON3D_TASK).
	Task string
	// Command is the program and its arguments, run without a shell after
	// $(VAR) expansion. A program without a slash is searched in the PATH of
	// the command's environment; a relative path is taken from WorkingDir.
	Command []string
	// Env is added after the controller's environment and the LARDON3D_*
	// variables, in order; a value may reference any variable before it.
	Env []EnvVar
	// Mark, when named, is set before Env in every process of the batch:
	// what a restarted controller finds them by (KillByEnv). A container
	// (ContainerEnv) does not get it.
	Mark EnvVar
	// WorkingDir of the command ("" keeps the controller's). With User, it
	// must be reachable by the user (the command enters it as the user).
	WorkingDir string
	// ContainerWorkingDir is the task's workingDir as written when it is
	// absolute, else "": where a container (whose file system is not this
	// machine's) starts.
	ContainerWorkingDir string
	// User, when set, is who the command runs as: a controller running as
	// root runs it with User's uid, gid and supplementary groups (exactly
	// User.Groups), and the items file is the user's; a controller that is
	// not root runs it only as itself (another uid: Start fails with
	// ErrRunAsUser). Either way HOME, USER and LOGNAME are the user's,
	// before Env (which may still set them); one the user has no value for
	// is removed, not left as the controller's. Run as another uid than the
	// controller's, the command gets nothing of the controller's
	// environment: its user's login variables (HOME, USER, LOGNAME, SHELL)
	// and PATH DefaultPath are its base. Nil runs the command as the
	// controller's own user, with its environment.
	User *User
	// Items are this batch's items, written one per line to the items file.
	Items []string
	// ItemCount, with Items nil, makes the batch's items the decimals
	// BatchStart … BatchStart+ItemCount-1 (a count's range: no string is
	// made per item; BatchSize, ItemStrings).
	ItemCount int64
	// BatchIndex is the batch's number within the task, from 0.
	BatchIndex int64
	// BatchStart is the index of the batch's first item within the task.
	BatchStart int64
	// ItemsTotal is the task's item count.
	ItemsTotal int64
	// Attempt is 1 for the first try of this batch (shown in the log header).
	Attempt int
	// Threads granted by the contract (at least 1).
	Threads int
	// MemoryLimit is the contract's memory in bytes; 0 means no limit.
	MemoryLimit int64
	// MemoryTolerance is the fraction above MemoryLimit that is tolerated;
	// 0 means DefaultMemoryTolerance, a negative value means none.
	MemoryTolerance float64
	// ScratchDir is the leased scratch directory ("" for none).
	ScratchDir string
	// ScratchBytes is the scratch lease's size (a Pod's ephemeral-storage
	// limit; processes are held to it by the lease's volume alone).
	ScratchBytes int64
	// GPUSlots are the GPU slots granted (a Pod's nvidia.com/gpu).
	GPUSlots int
	// GPUID is the GPU the contract reserved GPU memory on ("nvidia:0";
	// "" for none): an NVIDIA one is the only device the batch sees
	// (CUDA_VISIBLE_DEVICES, with CUDA_DEVICE_ORDER=PCI_BUS_ID).
	GPUID string
	// GPUMemoryLimit is the contract's GPU memory on GPUID in bytes (0:
	// none). With GPUMemory set, the batch is stopped with
	// ReasonGPUMemoryExceeded when its processes use more than this plus
	// MemoryTolerance.
	GPUMemoryLimit int64
	// GPUMemory, when set, measures the batch's GPU memory at each sample
	// (as fresh as the reader's own measurement).
	GPUMemory GPUMemoryReader
	// Timeout kills a batch that has been running (paused time excluded)
	// longer than this; 0 means none.
	Timeout time.Duration
	// LogPath is the task's log file, opened in append mode. For a batch
	// run as another User (uid 0 aside), its directory is held to the
	// rule of RunDir.
	LogPath string
	// PidsMax bounds the tasks (processes and threads) of the batch's
	// cgroup, where the pids controller is available: a fork bomb stops
	// there. 0: no bound.
	PidsMax int64
	// LogMaxBytes caps the log: once it holds more (checked at the start
	// and at every sample), what it holds moves to LogPath.1, replacing
	// the part there, and it starts again (rotateLog). 0: no cap.
	LogMaxBytes int64
	// RunDir is where the items file is written (created when missing),
	// as TASK.batch-INDEX.items. For a batch run as another User (uid 0
	// aside) it and the directories above it must be root's or the
	// controller's and writable by their owner alone (sticky ones above it
	// aside; Start fails with ErrRunAsUser otherwise); it is made
	// traversable (0711), and the directories above it must let the user
	// through too (the log says when they do not).
	RunDir string
	// Spares, when set, recycles the inodes of items files (see Spares);
	// nil creates each file and unlinks it after a successful batch.
	Spares *Spares
	// KillGrace is the time between SIGTERM and SIGKILL on cancel and
	// timeout; 0 means DefaultKillGrace.
	KillGrace time.Duration
	// SampleInterval is the memory sampling period; 0 means
	// DefaultSampleInterval.
	SampleInterval time.Duration
	// CPUs, when set, is the CPU affinity of the group (logical CPU numbers).
	CPUs []int
	// Cgroup, when set, is the subtree under which the batch gets a control
	// group of its own: the kernel then enforces the memory limit, counts
	// every process the batch starts and reports its peak. Nil runs the
	// batch as a process group watched by the RSS sampler alone.
	Cgroup *cgroup.Tree
	// OnProgress, when set, is called with the number of the batch's items
	// the command reports finished (a ProgressPrefix line in its output),
	// each time that number changes, at most once per SampleInterval. It
	// runs on the batch's supervising goroutine and must not block.
	OnProgress func(items int64)
	// Pod is the task's spec.pod: how an Executor that runs the batch as
	// a Pod makes it (image, volumes, identity). Processes ignore it.
	Pod *v1alpha1.TaskPod
}

// ProcessGroup identifies a batch's process group across controller
// restarts: a pid alone may be reused, a pid with its start time may not.
type ProcessGroup struct {
	// PGID is the group id, the leader's pid.
	PGID int `json:"pgid"`
	// StartTicks is the leader's start time in clock ticks since boot
	// (field 22 of /proc/PID/stat).
	StartTicks uint64 `json:"startTicks"`
	// BootID is /proc/sys/kernel/random/boot_id when the group started;
	// a different boot means nothing of the group can be left.
	BootID string `json:"bootID,omitempty"`
	// Cgroup names the batch's control group, when it has one: every
	// process the batch started, whatever its process group or session.
	Cgroup *cgroup.Ref `json:"cgroup,omitempty"`
}

// Result is how a batch ended.
type Result struct {
	// ExitCode of the leader; -1 when it was killed by a signal.
	ExitCode int
	// Reason is "" for a plain exit, else ReasonMemoryExceeded,
	// ReasonGPUMemoryExceeded, ReasonBatchTimeout or ReasonCancelled.
	Reason string
	// Message explains the end with numbers.
	Message string
	// PeakMemoryBytes is the kernel's peak charge of the batch's cgroup
	// (page cache included: what the limit is held against); without a
	// cgroup, the highest resident memory (RSS sum) sampled on the group.
	PeakMemoryBytes int64
	// PeakWorkingSetBytes is the batch's need: the highest working set
	// sampled (the cgroup's usage minus its inactive file pages: page cache
	// the batch only read does not count), raised to the kernel's peak less
	// the page cache still charged at the end (which catches a burst
	// between samples); without a cgroup, the same as PeakMemoryBytes.
	PeakWorkingSetBytes int64
	// OOMKills counts the batch's processes the kernel killed at its limit.
	OOMKills int64
	// PeakGPUMemoryBytes is the highest GPU memory the batch's processes
	// were measured using on Spec.GPUID, valid when GPUMemoryMeasured (a
	// GPU memory contract, and a reading that succeeded).
	PeakGPUMemoryBytes int64
	GPUMemoryMeasured  bool
	// CPUTime is the CPU time the batch's processes used: its cgroup's
	// (v2), else the leader's and that of the descendants it waited for
	// (rusage; a process that left the batch, killed at its end, is not
	// counted). 0 when unknown.
	CPUTime time.Duration
	// Enforcement says what held the batch to its contract: "cgroup v1
	// DIR", "cgroup v2 DIR" or "sampler".
	Enforcement string
	// Stragglers is how many processes of the group were still alive when
	// the leader exited, and were killed.
	Stragglers int
	// Started and Ended bound the batch.
	Started, Ended time.Time
}

// withDefaults returns s with the zero values replaced by the defaults, or
// an error naming the field that cannot be run.
func (s Spec) withDefaults() (Spec, error) {
	if len(s.Command) == 0 || s.Command[0] == "" {
		return s, fmt.Errorf("%w: empty command", ErrInvalidSpec)
	}
	if s.LogPath == "" {
		return s, fmt.Errorf("%w: no log path", ErrInvalidSpec)
	}
	if s.RunDir == "" {
		return s, fmt.Errorf("%w: no run directory", ErrInvalidSpec)
	}
	if s.Threads < 1 {
		s.Threads = 1
	}
	if s.Attempt < 1 {
		s.Attempt = 1
	}
	if s.MemoryLimit < 0 {
		return s, fmt.Errorf("%w: negative memory limit %d", ErrInvalidSpec, s.MemoryLimit)
	}
	s.MemoryTolerance = EffectiveTolerance(s.MemoryTolerance)
	if s.KillGrace <= 0 {
		s.KillGrace = DefaultKillGrace
	}
	if s.SampleInterval <= 0 {
		s.SampleInterval = DefaultSampleInterval
	}
	return s, nil
}

// minV1KernelLimit is the smallest hard limit given to a batch's cgroup on
// cgroup v1. There the controller's forking thread is inside the batch's
// cgroup from the fork to the exec: under a limit smaller than what an exec
// charges (page tables, stack, arguments), the kernel's OOM killer may pick
// the controller itself. A smaller contract is held by the sampler.
const minV1KernelLimit = 8 << 20

// kernelLimit is the hard limit of the batch's cgroup: the ceiling, raised
// to minV1KernelLimit on cgroup v1; 0 for no limit.
func (s Spec) kernelLimit(version int) int64 {
	c := s.memoryCeiling()
	if c > 0 && version == 1 {
		return max(c, minV1KernelLimit)
	}
	return c
}

// belowFloor reports a contract whose ceiling is below the cgroup's
// limit (the v1 floor): the runner, not the kernel, holds the working set
// to it.
func (s Spec) belowFloor(version int) bool {
	c := s.memoryCeiling()
	return c > 0 && c < s.kernelLimit(version)
}

// MemoryCeiling is the memory above which the batch is killed, its
// tolerance defaulted as Start does: what a Pod's memory limit is. 0 for
// no limit.
func (s Spec) MemoryCeiling() int64 {
	s.MemoryTolerance = EffectiveTolerance(s.MemoryTolerance)
	return s.memoryCeiling()
}

// EffectiveTolerance is the tolerance Spec.MemoryTolerance t stands for: 0
// means DefaultMemoryTolerance, a negative value none.
func EffectiveTolerance(t float64) float64 {
	switch {
	case t == 0:
		return DefaultMemoryTolerance
	case t < 0:
		return 0
	}
	return t
}

// memoryCeiling is the memory above which the batch is killed (the
// cgroup's hard limit, or the sampler's threshold), 0 for no limit.
func (s Spec) memoryCeiling() int64 {
	if s.MemoryLimit == 0 {
		return 0
	}
	return int64(float64(s.MemoryLimit) * (1 + s.MemoryTolerance))
}
