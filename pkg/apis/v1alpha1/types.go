package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// APIVersion is the only apiVersion this package accepts.
const APIVersion = "lardon3d.io/v1alpha1"

// KindTask is the only kind this package accepts.
const KindTask = "Task"

// Task is one unit of batch work dropped into the spool as a YAML manifest.
// The user owns metadata and spec; the controller owns status.
type Task struct {
	// APIVersion must be lardon3d.io/v1alpha1.
	APIVersion string `json:"apiVersion" validate:"eq=lardon3d.io/v1alpha1"`
	// Kind must be Task.
	Kind string `json:"kind" validate:"eq=Task"`
	// Metadata names and labels the task.
	Metadata ObjectMeta `json:"metadata,omitzero"`
	// Spec is what the user asks for.
	Spec TaskSpec `json:"spec"`
	// Status is written by the controller only.
	Status TaskStatus `json:"status,omitzero" validate:"-"`
}

// ObjectMeta is the faithful subset of Kubernetes' ObjectMeta a Task carries.
type ObjectMeta struct {
	// Name defaults to the manifest's file name without its extension.
	Name string `json:"name,omitempty" validate:"required,dnsname"`
	// Labels are free key/value pairs for selection and display.
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are free key/value pairs for tools.
	Annotations map[string]string `json:"annotations,omitempty"`
	// Generation is informational; the controller derives the effective
	// generation from the spec's hash (see TaskStatus.SpecHash).
	Generation int64 `json:"generation,omitempty"`
}

// TaskClass names the kind of photogrammetry step; it keys the governor's
// per-class batch history.
// +kubebuilder:validation:Enum=import;thumbnails;exif;features;matching;sfm;depthmaps;mesh;texture;custom
type TaskClass string

// The task classes of SPEC.md.
const (
	ClassImport     TaskClass = "import"
	ClassThumbnails TaskClass = "thumbnails"
	ClassExif       TaskClass = "exif"
	ClassFeatures   TaskClass = "features"
	ClassMatching   TaskClass = "matching"
	ClassSfM        TaskClass = "sfm"
	ClassDepthMaps  TaskClass = "depthmaps"
	ClassMesh       TaskClass = "mesh"
	ClassTexture    TaskClass = "texture"
	ClassCustom     TaskClass = "custom"
)

// TaskSpec is the user's request.
//
// The kubebuilder markers give the CRD (deploy/crd) the rules Validate
// applies, so that the API server refuses what a node would reject;
// TestCRDRefusesWhatValidateRefuses holds the two to the same cases.
// Not in the CRD: items.glob's syntax, batch.max against a glob's
// count (known once resolved), strict without memory costs.
//
// +kubebuilder:validation:XValidation:rule="!has(self.items.count) || !has(self.resources) || !has(self.resources.batch) || !has(self.resources.batch.max) || self.resources.batch.max <= self.items.count",message="resources.batch.max must be <= the item count",fieldPath=".resources.batch.max"
// +kubebuilder:validation:XValidation:rule="!has(self.items.count) || !has(self.resources) || !has(self.resources.batch) || !has(self.resources.batch.min) || self.resources.batch.min <= self.items.count",message="resources.batch.min must be <= the item count",fieldPath=".resources.batch.min"
// +kubebuilder:validation:XValidation:rule="!has(self.items.files) || !has(self.resources) || !has(self.resources.batch) || !has(self.resources.batch.max) || self.resources.batch.max <= size(self.items.files)",message="resources.batch.max must be <= the item count",fieldPath=".resources.batch.max"
// +kubebuilder:validation:XValidation:rule="!has(self.resources) || !has(self.resources.batch) || !has(self.resources.batch.max) || self.resources.batch.max != 0 || has(self.items.glob)",message="resources.batch.max must be >= batch.min (0 stands for the count of a glob only)",fieldPath=".resources.batch.max"
type TaskSpec struct {
	// Class is one of import|thumbnails|exif|features|matching|sfm|depthmaps|mesh|texture|custom (default custom).
	Class TaskClass `json:"class,omitempty" validate:"omitempty,oneof=import thumbnails exif features matching sfm depthmaps mesh texture custom"`
	// Command is run once per batch, without a shell; $(VAR) expands like Kubernetes.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:XValidation:rule="size(self[0]) > 0",message="must name the program to run"
	Command []string `json:"command"`
	// WorkingDir is where the command runs and where items.glob is resolved;
	// relative paths are relative to the spool directory.
	WorkingDir string `json:"workingDir,omitempty"`
	// Env is added to the batch environment.
	Env []EnvVar `json:"env,omitempty" validate:"dive"`
	// Items lists the work, as exactly one of count, files or glob.
	Items Items `json:"items"`
	// DependsOn names tasks that must be Done before this one is admitted.
	// +kubebuilder:validation:items:MaxLength=251
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	DependsOn []string `json:"dependsOn,omitempty" validate:"dive,dnsname"`
	// Resources is the resource estimate handed to the governor.
	Resources Resources `json:"resources,omitzero"`
	// Retries is how many times a failed batch is retried, with exponential backoff.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Retries int32 `json:"retries,omitempty" validate:"min=0,max=100"`
	// BatchTimeout kills a batch that runs longer (0: no limit).
	BatchTimeout *metav1.Duration `json:"batchTimeout,omitempty"`
	// Paused stops the task's processes (SIGSTOP) while keeping its reservation.
	Paused bool `json:"paused,omitempty"`
	// Priority orders the task before every task of a lower priority, whatever their owners: an integer from -1000000000 to 1000000000, or the name of a class of the controller's configuration (priorityClasses, as Kubernetes' PriorityClass); default the configuration's defaultPriority, else 0. Between tasks of one priority, the owner who used the least of their share goes first.
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= -1000000000 && self <= 1000000000) : self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self) <= 63",message="must be an integer from -1000000000 to 1000000000 or the name of a priority class"
	Priority *intstr.IntOrString `json:"priority,omitempty" validate:"omitnil,priority"`
	// RetryToken, when changed, starts a new generation with the same spec: `retry NAME` writes a new one to run a Failed task again, from its committed progress.
	RetryToken string `json:"retryToken,omitempty"`
	// Pod says how the node agent runs each batch as a Pod on Kubernetes (image, volumes, identity); the spool mode runs the command on its own machine and ignores it.
	Pod *TaskPod `json:"pod,omitempty"`
	// RestartToken, when changed while the task runs with an edited spec waiting (SpecApplied=False), applies the edit now: `restart NAME` writes a new one; the batch in flight is cancelled and the edited spec starts as the next generation, from the committed progress. Not part of the spec: changing it alone starts nothing.
	RestartToken string `json:"restartToken,omitempty"`
}

// TaskPod is how the node agent makes the Pod of each batch: the
// container runs Command in Image, its limits and requests are the
// batch's contract, and the items file and the batch's variables reach it
// as they reach a process.
type TaskPod struct {
	// Image is the container image every batch runs in.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image" validate:"required"`
	// ImagePullPolicy is Always, IfNotPresent or Never (default: the cluster's, IfNotPresent for a tagged image).
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	ImagePullPolicy string `json:"imagePullPolicy,omitempty" validate:"omitempty,oneof=Always IfNotPresent Never"`
	// ServiceAccountName is the Pod's identity; with none, no API token is mounted into it.
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName,omitempty" validate:"omitempty,dnsname"`
	// HostNetwork runs the Pod in its node's network namespace.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// RunAsUser is the uid the container's processes run as (default: the image's).
	// +kubebuilder:validation:Minimum=0
	RunAsUser *int64 `json:"runAsUser,omitempty" validate:"omitnil,min=0"`
	// RunAsGroup is their primary gid (default: the image's).
	// +kubebuilder:validation:Minimum=0
	RunAsGroup *int64 `json:"runAsGroup,omitempty" validate:"omitnil,min=0"`
	// RunAsNonRoot makes the kubelet refuse to start a container that would run as uid 0.
	RunAsNonRoot *bool `json:"runAsNonRoot,omitempty"`
	// Volumes are mounted into the container; the namespace's Pod Security level decides which kinds it admits.
	Volumes []PodVolume `json:"volumes,omitempty" validate:"dive"`
	// NodeSelector is copied onto each Pod: a node whose labels do not match cannot run the task's batches.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are copied onto each Pod.
	Tolerations []PodToleration `json:"tolerations,omitempty" validate:"dive"`
}

// PodVolume is one volume of a batch's Pod, mounted at MountPath: exactly
// one of ClaimName, HostPath or EmptyDir.
//
// +kubebuilder:validation:XValidation:rule="[has(self.claimName), has(self.hostPath), has(self.emptyDir) && self.emptyDir].filter(x, x).size() == 1",message="must set exactly one of claimName, hostPath, emptyDir"
type PodVolume struct {
	// Name of the volume, a DNS label.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name" validate:"required,dnslabel"`
	// MountPath is where the container sees it (absolute).
	// +kubebuilder:validation:Pattern=`^/`
	MountPath string `json:"mountPath" validate:"required,abspath"`
	// ReadOnly mounts it read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
	// ClaimName names a PersistentVolumeClaim of the task's namespace.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ClaimName string `json:"claimName,omitempty" validate:"omitempty,dnsname"`
	// HostPath is a directory of the node (absolute).
	// +kubebuilder:validation:Pattern=`^/`
	HostPath string `json:"hostPath,omitempty" validate:"omitempty,abspath"`
	// EmptyDir is a directory of the Pod's own, gone with it.
	EmptyDir bool `json:"emptyDir,omitempty"`
}

// PodToleration lets a batch's Pod onto a node with a matching taint.
type PodToleration struct {
	// Key is the taint's key (empty with operator Exists: every taint).
	Key string `json:"key,omitempty"`
	// Operator is Equal (default) or Exists.
	// +kubebuilder:validation:Enum=Equal;Exists
	Operator string `json:"operator,omitempty" validate:"omitempty,oneof=Equal Exists"`
	// Value is the taint's value, with Equal.
	Value string `json:"value,omitempty"`
	// Effect is NoSchedule, PreferNoSchedule or NoExecute (empty: all).
	// +kubebuilder:validation:Enum=NoSchedule;PreferNoSchedule;NoExecute
	Effect string `json:"effect,omitempty" validate:"omitempty,oneof=NoSchedule PreferNoSchedule NoExecute"`
}

// EnvVar is one environment variable for the command.
type EnvVar struct {
	// Name of the variable.
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name" validate:"required,envname"`
	// Value of the variable; $(VAR) references expand.
	Value string `json:"value,omitempty"`
}

// Items is exactly one of Count, Files or Glob.
//
// +kubebuilder:validation:XValidation:rule="[has(self.count), has(self.files), has(self.glob) && size(self.glob) > 0].filter(x, x).size() == 1",message="must set exactly one of count, files, glob"
type Items struct {
	// Count is a number of anonymous items, indexed from 0.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	Count *int64 `json:"count,omitempty" validate:"omitnil,min=1,max=10000000"`
	// Files lists item paths, relative to workingDir or absolute.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:items:MinLength=1
	Files []string `json:"files,omitempty" validate:"dive,required"`
	// Glob is a pattern relative to workingDir, resolved once and sorted; ** matches any depth, {jpg,JPG} alternatives.
	Glob string `json:"glob,omitempty" validate:"omitempty,globpattern"`
}

// Resources is the estimate of SPEC.md (Lardon3DResourceEstimate).
//
// +kubebuilder:validation:XValidation:rule="!has(self.minThreads) || !has(self.threads) || self.minThreads <= self.threads",message="minThreads must be <= threads",fieldPath=".minThreads"
type Resources struct {
	// Fixed is paid once per batch.
	Fixed Cost `json:"fixed,omitzero"`
	// PerItem is paid for every item of a batch.
	PerItem Cost `json:"perItem,omitzero"`
	// PerThread is paid for every thread granted.
	PerThread Cost `json:"perThread,omitzero"`
	// Batch bounds the batch size.
	Batch BatchBounds `json:"batch,omitzero"`
	// Threads is the number of threads wished; the contract may grant fewer.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	Threads int32 `json:"threads,omitempty" validate:"min=1,max=4096"`
	// MinThreads is the fewest threads the command can run with.
	// +kubebuilder:validation:Minimum=1
	MinThreads int32 `json:"minThreads,omitempty" validate:"min=1"`
	// IOSlots is the number of heavy-IO slots a batch holds.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	IOSlots int32 `json:"ioSlots,omitempty" validate:"min=0,max=1024"`
	// GPUSlots is the number of GPU slots a batch holds.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	GPUSlots int32 `json:"gpuSlots,omitempty" validate:"min=0,max=1024"`
	// Scratch is the scratch disk lease a batch needs.
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : !self.startsWith('-')",message="must be >= 0"
	Scratch *resource.Quantity `json:"scratch,omitempty"`
	// Estimate is how the memory costs are chosen: declared (the default
	// when any memory cost is stated: the costs are the contract, raised
	// after a batch is killed for memory), learned (the default when none
	// is: from the profile's history), or strict (the declared costs only;
	// a batch over them is retried smaller, and fails at batch.min).
	Estimate EstimateMode `json:"estimate,omitempty" validate:"omitempty,oneof=declared learned strict"`
	// Profile names the history the task's batches feed and learn from
	// (default: the class and the program, e.g. features/colmap; for a
	// shell or an interpreter, the script file it runs or the first
	// program of its inline script, e.g. custom/train.py).
	// +kubebuilder:validation:MaxLength=251
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Profile string `json:"profile,omitempty" validate:"omitempty,dnsname"`
}

// EstimateMode says how a task's memory costs are chosen.
// +kubebuilder:validation:Enum=declared;learned;strict
type EstimateMode string

// The estimate modes.
const (
	// EstimateDeclared: the stated costs are the contract; a batch killed
	// for memory is retried under its measured need, bumped.
	EstimateDeclared EstimateMode = "declared"
	// EstimateLearned: the profile's learned model gives the costs.
	EstimateLearned EstimateMode = "learned"
	// EstimateStrict: the stated costs only; today's fail-fast behaviour.
	EstimateStrict EstimateMode = "strict"
)

// EstimateModes lists every estimate mode.
var EstimateModes = []EstimateMode{EstimateDeclared, EstimateLearned, EstimateStrict}

// EffectiveEstimate is the mode a resources block asks for: its Estimate,
// else declared when any memory cost is stated, else learned.
func (r Resources) EffectiveEstimate() EstimateMode {
	if r.Estimate != "" {
		return r.Estimate
	}
	for _, q := range []*resource.Quantity{r.Fixed.Memory, r.PerItem.Memory, r.PerThread.Memory} {
		if q != nil && !q.IsZero() {
			return EstimateDeclared
		}
	}
	return EstimateLearned
}

// Cost is an amount of memory and GPU memory.
type Cost struct {
	// Memory is RAM.
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : !self.startsWith('-')",message="must be >= 0"
	Memory *resource.Quantity `json:"memory,omitempty"`
	// GPUMemory is GPU memory (VRAM, or RAM on unified-memory GPUs).
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : !self.startsWith('-')",message="must be >= 0"
	GPUMemory *resource.Quantity `json:"gpuMemory,omitempty"`
}

// BatchBounds bounds the number of items in one batch.
//
// +kubebuilder:validation:XValidation:rule="!has(self.max) || self.max == 0 || self.max >= (has(self.min) ? self.min : 1)",message="max must be >= min",fieldPath=".max"
type BatchBounds struct {
	// Min is the smallest useful batch (default 1).
	// +kubebuilder:validation:Minimum=1
	Min int64 `json:"min,omitempty" validate:"min=1"`
	// Max is the largest batch wished (default: the item count; with items.glob,
	// 0 stands for the count once resolved, see BatchBounds.EffectiveMax).
	// +kubebuilder:validation:Minimum=0
	Max int64 `json:"max,omitempty" validate:"min=0"`
}

// Phase is where a task is in its life.
type Phase string

// The phases. Allowed transitions are listed on each; AllowedTransition is the
// single place that encodes them.
const (
	// PhasePending: known, waiting for dependencies or admission.
	// → Reserved, Rejected, Failed (a dependency failed stays Pending with a
	// condition), Done (every item already committed: nothing to reserve).
	PhasePending Phase = "Pending"
	// PhaseReserved: the governor granted a reservation; a worker is taking it.
	// → Running, Paused, Pending (cancelled before start), Failed.
	PhaseReserved Phase = "Reserved"
	// PhaseRunning: a worker is executing batches.
	// → Paused, Done, Failed, Pending (controller restart or requeue).
	PhaseRunning Phase = "Running"
	// PhasePaused: spec.paused is true; the reservation is kept.
	// → Running, Pending (restart, or told to wait at a sequence break),
	// Failed, Done (the last batch ended while its group was being stopped).
	PhasePaused Phase = "Paused"
	// PhaseDone: every item processed. Terminal; a spec edit → Pending (or
	// Rejected when the edited spec is invalid).
	PhaseDone Phase = "Done"
	// PhaseFailed: a batch failed past its retries or could not start.
	// Terminal; a spec edit → Pending (or Rejected when the edited spec is invalid).
	PhaseFailed Phase = "Failed"
	// PhaseRejected: invalid spec or a demand that can never fit.
	// Terminal; a spec edit → Pending.
	PhaseRejected Phase = "Rejected"
)

// TaskStatus is written back into the manifest by the controller.
type TaskStatus struct {
	// Phase is the task's phase.
	Phase Phase `json:"phase,omitempty"`
	// ObservedGeneration is the generation of the spec the status describes.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// SpecHash identifies the spec of ObservedGeneration; a different hash
	// means the user edited the spec (a new generation).
	SpecHash string `json:"specHash,omitempty"`
	// TaskName is the metadata.name the status was written for: a
	// manifest copied under another name does not take the copied task's
	// progress or phase (its status is another task's).
	TaskName string `json:"taskName,omitempty"`
	// QueueSeq is the task's FIFO position; it survives controller restarts.
	QueueSeq int64 `json:"queueSeq,omitempty"`
	// Conditions say why the task is where it is, one of each type.
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Reservation is the contract the task currently holds.
	Reservation *Contract `json:"reservation,omitempty"`
	// Progress counts committed work; items [0, itemsDone) are done.
	Progress Progress `json:"progress,omitempty"`
	// LastBatch describes the most recent batch.
	LastBatch *BatchRecord `json:"lastBatch,omitempty"`
	// ProcessGroup identifies the batch in flight, so that a restarted
	// controller can kill what a crashed one left.
	ProcessGroup *ProcessGroupRef `json:"processGroup,omitempty"`
	// CreationTime is when a controller first read the manifest as this
	// task (a copy under another name starts anew): the task's age, as
	// get's AGE counts it, like kubectl's from creationTimestamp.
	CreationTime *metav1.Time `json:"creationTime,omitempty"`
	// StartTime is when the first batch started.
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the task reached a terminal phase.
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// LogFile is the path of the task's output log.
	LogFile string `json:"logFile,omitempty"`
}

// Contract is the public snapshot of a governor reservation.
type Contract struct {
	// Batch is the number of items granted.
	Batch int64 `json:"batch"`
	// BatchRequested is the number of items asked for.
	BatchRequested int64 `json:"batchRequested"`
	// Threads is the number of threads granted.
	Threads int32 `json:"threads"`
	// Memory is the RAM reserved.
	Memory resource.Quantity `json:"memory"`
	// GPUMemory is the GPU memory reserved.
	GPUMemory *resource.Quantity `json:"gpuMemory,omitempty"`
	// IOSlots held.
	IOSlots int32 `json:"ioSlots,omitempty"`
	// GPUSlots held.
	GPUSlots int32 `json:"gpuSlots,omitempty"`
	// Scratch is the scratch lease.
	Scratch *resource.Quantity `json:"scratch,omitempty"`
	// ScratchDir is the leased scratch directory.
	ScratchDir string `json:"scratchDir,omitempty"`
	// Generation is the governor generation the contract was granted in.
	Generation uint64 `json:"generation,omitempty"`
	// GrantedAt is when the contract was granted.
	GrantedAt metav1.Time `json:"grantedAt"`
}

// Progress counts committed work.
type Progress struct {
	// ItemsDone is the number of items whose batch exited 0.
	ItemsDone int64 `json:"itemsDone"`
	// ItemsTotal is the number of items of the task.
	ItemsTotal int64 `json:"itemsTotal"`
	// BatchesDone is the number of batches that exited 0.
	BatchesDone int64 `json:"batchesDone"`
	// InputsHash identifies the items and working directory the progress
	// counts (InputsHash of the spec): progress carries over to a new
	// generation only when it is unchanged.
	InputsHash string `json:"inputsHash,omitempty"`
}

// BatchRecord describes one batch run.
type BatchRecord struct {
	// Index is the batch's number, from 0.
	Index int64 `json:"index"`
	// Start is the index of the batch's first item.
	Start int64 `json:"start"`
	// Size is the number of items.
	Size int64 `json:"size"`
	// Threads granted.
	Threads int32 `json:"threads,omitempty"`
	// StartTime of the batch.
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// EndTime of the batch (nil while running).
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// ExitCode of the command (nil while running or when killed).
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Reason is why the batch ended, when not a plain exit.
	Reason string `json:"reason,omitempty"`
	// PeakMemory is the batch's peak memory: the kernel's peak charge of
	// its cgroup (page cache included), or, where the controller runs
	// without cgroups, the highest resident memory sampled on its process
	// group.
	PeakMemory *resource.Quantity `json:"peakMemory,omitempty"`
	// WorkingSet is the batch's highest working set sampled in its cgroup:
	// memory minus the page cache the kernel can reclaim (what a file the
	// batch only read costs does not count).
	WorkingSet *resource.Quantity `json:"workingSet,omitempty"`
	// PeakGPUMemory is the highest GPU memory the batch's processes were
	// seen using on the GPU it reserved memory on (sampled every few
	// seconds: see the README's "GPU memory"); nil when it reserved none
	// or none could be read.
	PeakGPUMemory *resource.Quantity `json:"peakGPUMemory,omitempty"`
	// Attempt is the attempt number for this batch, from 1.
	Attempt int32 `json:"attempt,omitempty"`
	// ItemsReported is, while the batch runs, how many of its items the
	// command says it finished (its last "LARDON3D_PROGRESS n" line). It
	// is not committed: the batch's items are done only when it exits 0.
	ItemsReported *int64 `json:"itemsReported,omitempty"`
	// PausedSeconds is, while the batch runs, how long it was stopped by
	// pauses that ended (whole seconds): its running time is its time
	// since StartTime less this.
	PausedSeconds int64 `json:"pausedSeconds,omitempty"`
	// PausedSince is when the pause in force stopped the batch (nil when
	// it runs).
	PausedSince *metav1.Time `json:"pausedSince,omitempty"`
}

// ProcessGroupRef identifies a process group across controller restarts.
type ProcessGroupRef struct {
	// PGID is the process group id (the leader's pid).
	PGID int `json:"pgid"`
	// StartTicks is the leader's start time in clock ticks since boot
	// (/proc/PID/stat field 22), so a reused pid is never killed.
	StartTicks uint64 `json:"startTicks"`
	// Cgroup is the batch's cgroup directory (the memory hierarchy's on
	// cgroup v1), when it has one: every process of the batch is there,
	// whatever its process group or session.
	Cgroup string `json:"cgroup,omitempty"`
}

// Condition types used in status.conditions.
const (
	// ConditionValid is False when the spec is invalid.
	ConditionValid = "Valid"
	// ConditionDependenciesReady is False while a dependency is not Done.
	ConditionDependenciesReady = "DependenciesReady"
	// ConditionAdmitted is False while the governor says Wait, with its message.
	ConditionAdmitted = "Admitted"
	// ConditionSpecApplied is False when the file holds spec edits the
	// running task cannot take yet.
	ConditionSpecApplied = "SpecApplied"
	// ConditionComplete is True on Done, False on Failed/Rejected.
	ConditionComplete = "Complete"
	// ConditionRerun is True on a generation started because a dependency
	// ran again: the message names it.
	ConditionRerun = "Rerun"
	// ConditionEstimateLow is True when a batch was killed for memory: the
	// message says by how much the estimate was low and suggests a
	// resources block.
	ConditionEstimateLow = "EstimateTooLow"
	// ConditionEvicted is True once a batch of the task yielded its
	// memory to programs outside the batches: the message names them and
	// the numbers. It is not a failure: no retry is spent, the estimate
	// is unchanged.
	ConditionEvicted = "Evicted"
)

// Condition reasons that are not governor reasons.
const (
	ReasonInvalidSpec            = "InvalidSpec"
	ReasonDuplicateName          = "DuplicateName"
	ReasonWaitingForDependencies = "WaitingForDependencies"
	ReasonDependencyFailed       = "DependencyFailed"
	ReasonDependencyCycle        = "DependencyCycle"
	ReasonDependencyMissing      = "DependencyMissing"
	ReasonMemoryExceeded         = "MemoryExceeded"
	// ReasonGPUMemoryExceeded: the batch's processes used more GPU memory
	// than its contract plus the tolerance; the batch was killed.
	ReasonGPUMemoryExceeded = "GPUMemoryExceeded"
	ReasonBatchTimeout      = "BatchTimeout"
	ReasonCommandNotFound   = "CommandNotFound"
	ReasonExitCode          = "NonZeroExit"
	ReasonCompleted         = "Completed"
	ReasonAdmitted          = "Admitted"
	ReasonSpecChangePending = "SpecChangePending"
	ReasonDependencyRerun   = "DependencyRerun"
	ReasonPaused            = "Paused"
	// ReasonEvicted: the batch was killed by the controller to give the
	// memory back to programs outside the batches (memory pressure); the
	// task is Pending again with its committed progress.
	ReasonEvicted = "Evicted"
	// ReasonAllDone is DependenciesReady=True's: every dependency is Done.
	ReasonAllDone = "AllDone"
)

// WaitsOnDependencies reports whether a reason to wait is about the
// task's dependencies (condition DependenciesReady) rather than its
// admission (condition Admitted).
func WaitsOnDependencies(reason string) bool {
	switch reason {
	case ReasonWaitingForDependencies, ReasonDependencyFailed, ReasonDependencyMissing:
		return true
	}
	return false
}

// MaxPriority bounds an integer spec.priority (and its negative, the lowest).
const MaxPriority = 1_000_000_000

// PriorityValid reports whether p is a valid spec.priority: an integer
// within ±MaxPriority, or a class name (a DNS label).
func PriorityValid(p intstr.IntOrString) bool {
	if p.Type == intstr.Int {
		return true // the decoder bounds it (intOrStringType); an int32 is within
	}
	return len(validation.IsDNS1123Label(p.StrVal)) == 0
}
