package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// runInfo is what a batch of a task needs beyond its contract.
type runInfo struct {
	command []string
	env     []runner.EnvVar
	workDir string
	items   v1alpha1.ItemList
	logPath string
	runDir  string
	// user runs the batches (nil: the controller's user).
	user *runner.User
	// mark is the variable StateDirEnv (runner.Spec.Mark).
	mark runner.EnvVar
	// containerWorkDir is spec.workingDir when absolute (runner.Spec's
	// ContainerWorkingDir).
	containerWorkDir string
	// pod is the task's spec.pod (a Pod executor's; nil: none).
	pod *v1alpha1.TaskPod
	// inputPerItem is the mean size of the items that are files (0 when
	// none is), for the learner's input term.
	inputPerItem float64
}

// groupNote tells the owner that a batch's process group started, so that
// the group is recorded in status for a restarted controller to clean up.
type groupNote struct {
	task  string
	group runner.ProcessGroup
}

// progressNote tells the owner how many items of a running batch its
// command reports finished.
type progressNote struct {
	task       string
	generation int64
	index      int64
	items      int64
}

// batchRunner adapts package runner to the queue's BatchRunner.
type batchRunner struct {
	killGrace time.Duration
	tolerance float64
	// logMax caps each task's log (runner.Spec.LogMaxBytes; 0: no cap).
	logMax int64
	// pidsMax bounds each batch's tasks (runner.Spec.PidsMax; 0: none).
	pidsMax int64
	onGroup func(groupNote)
	// onProgress, when set, hears a running batch's reported progress.
	onProgress func(progressNote)
	// scratch creates a lease's directory before its batch starts.
	scratch interface{ Create(dir string) error }
	// cgroups is the subtree of the batches' cgroups; nil without.
	cgroups *cgroup.Tree
	// gpuMemory measures the batches' GPU memory; nil: not held to it.
	gpuMemory runner.GPUMemoryReader
	// commitFirst makes Start wait until the items before the batch are
	// committed in the task's status (Config.CommitBeforeNextBatch).
	commitFirst bool
	// journal records the process groups in flight (set by Run, after
	// what a previous controller left is handled).
	journal *groupJournal
	// spares recycles the items files' inodes.
	spares *runner.Spares
	// exec runs the batches (Deps.Executor; runner.Processes when nil).
	exec runner.Executor
	// runDir holds the items files (STATE/run).
	runDir string
	// stateDir, when set, is made again (makeStateDir) before each batch.
	stateDir string
	// cleanups counts the batches whose end (cgroup removal, journal
	// line) is not done yet.
	cleanups sync.WaitGroup

	mu struct {
		sync.Mutex
		// tasks holds, per task name, what each generation's batches need:
		// a new generation is recorded before the queue may start it, and
		// the generation still running keeps its own until it ends.
		tasks map[string]map[int64]*runInfo
		// running holds each running batch with what the queue asked.
		running map[runner.Execution]queue.Batch
		// live counts, per task name, the batches whose processes are not
		// all gone yet (a cancelled one in its kill grace included);
		// liveCh is closed (and replaced) when a count falls.
		live   map[string]int
		liveCh chan struct{}
		// forgotten holds the tasks forgotten while a batch of theirs
		// still ran: their items files go when it ends.
		forgotten map[string]bool
		// committed is, per task, the generation and the items of it
		// its written status commits; committedCh is closed (and
		// replaced) when it grows.
		committed   map[string]committedMark
		committedCh chan struct{}
	}
}

// committedMark is what a task's written status commits.
type committedMark struct {
	generation, items int64
}

var _ queue.BatchRunner = (*batchRunner)(nil)

func newBatchRunner(killGrace time.Duration, tolerance float64, onGroup func(groupNote)) *batchRunner {
	b := &batchRunner{killGrace: killGrace, tolerance: tolerance, onGroup: onGroup, spares: runner.NewSpares()}
	b.mu.tasks = make(map[string]map[int64]*runInfo)
	b.mu.running = make(map[runner.Execution]queue.Batch)
	b.mu.live = make(map[string]int)
	b.mu.forgotten = make(map[string]bool)
	b.mu.liveCh = make(chan struct{})
	b.mu.committed = make(map[string]committedMark)
	b.mu.committedCh = make(chan struct{})
	return b
}

// noteCommitted records that the status of a task at generation gen, as
// written (or read from its source), commits items items. Without
// commitFirst nobody waits for it: nothing is kept.
func (b *batchRunner) noteCommitted(name string, gen, items int64) {
	if !b.commitFirst {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.mu.committed[name]
	if ok && m.generation == gen && m.items >= items {
		return
	}
	b.mu.committed[name] = committedMark{generation: gen, items: items}
	close(b.mu.committedCh)
	b.mu.committedCh = make(chan struct{})
}

// waitCommitted returns once the status of the task at gen commits at
// least items items, or with ctx's error.
func (b *batchRunner) waitCommitted(ctx context.Context, name string, gen, items int64) error {
	for {
		b.mu.Lock()
		m, ch := b.mu.committed[name], b.mu.committedCh
		b.mu.Unlock()
		if m.generation == gen && m.items >= items {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("task %q: waiting for items [0, %d) to be committed: %w", name, items, context.Cause(ctx))
		}
	}
}

// set records what the batches of generation gen of a task need.
func (b *batchRunner) set(name string, gen int64, ri *runInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.mu.forgotten, name) // back before its old batch ended
	gens := b.mu.tasks[name]
	if gens == nil {
		gens = make(map[int64]*runInfo, 1)
		b.mu.tasks[name] = gens
	}
	gens[gen] = ri
}

// drop forgets one generation of a task (the queue did not take it).
func (b *batchRunner) drop(name string, gen int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.mu.tasks[name], gen)
	if len(b.mu.tasks[name]) == 0 {
		delete(b.mu.tasks, name)
	}
}

// keepOnly forgets every generation of a task but gen (the queue took it,
// so no other generation starts a batch again).
func (b *batchRunner) keepOnly(name string, gen int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for g := range b.mu.tasks[name] {
		if g != gen {
			delete(b.mu.tasks[name], g)
		}
	}
}

// forget drops a task; the items files its failed batches kept go once
// no batch of it runs.
func (b *batchRunner) forget(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.mu.tasks, name)
	delete(b.mu.committed, name)
	if b.mu.live[name] == 0 {
		b.lockedRemoveItemsFiles(name)
	} else {
		b.mu.forgotten[name] = true // once its last batch ends
	}
}

// removeItemsFiles is lockedRemoveItemsFiles.
func (b *batchRunner) removeItemsFiles(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lockedRemoveItemsFiles(name)
}

// lockedRemoveItemsFiles removes, off the caller's goroutine, the items
// files a task's failed batches kept. REQUIRES: b.mu held.
func (b *batchRunner) lockedRemoveItemsFiles(name string) {
	if b.runDir == "" {
		return
	}
	b.cleanups.Add(1)
	go func() {
		defer b.cleanups.Done()
		runner.RemoveItemsFiles(b.runDir, name)
	}()
}

func (b *batchRunner) lookup(name string, gen int64) *runInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.tasks[name][gen]
}

// Start launches one batch of a task under its contract.
func (b *batchRunner) Start(ctx context.Context, qb queue.Batch) (queue.RunningBatch, error) {
	ri := b.lookup(qb.Task, qb.Generation)
	if ri == nil {
		return nil, fmt.Errorf("task %q generation %d: unknown to the batch runner", qb.Task, qb.Generation)
	}
	end := qb.Start + qb.Size
	if qb.Start < 0 || end > ri.items.Len() {
		return nil, fmt.Errorf("task %q: batch items [%d, %d) out of range (%d items)", qb.Task, qb.Start, end, ri.items.Len())
	}
	if b.commitFirst && qb.Start > 0 {
		// The batch before this one must be committed in the status
		// first: a node lost now loses only the batches in flight.
		if err := b.waitCommitted(ctx, qb.Task, qb.Generation, qb.Start); err != nil {
			return nil, err
		}
	}
	c := qb.Contract
	if c.ScratchDir != "" && b.scratch != nil {
		if err := b.scratch.Create(c.ScratchDir); err != nil {
			return nil, runner.NewPrepareError(fmt.Errorf("task %q: %w", qb.Task, err))
		}
		if ri.user != nil {
			// The controller just made it, under a root-owned volume's
			// lease directory: no link to follow.
			if err := os.Lchown(c.ScratchDir, int(ri.user.UID), int(ri.user.GID)); err != nil {
				return nil, runner.NewPrepareError(fmt.Errorf("task %q: scratch lease for uid %d: %w", qb.Task, ri.user.UID, err))
			}
		}
	}
	spec := runner.Spec{
		Task:                qb.Task,
		Command:             ri.command,
		Env:                 ri.env,
		WorkingDir:          ri.workDir,
		ContainerWorkingDir: ri.containerWorkDir,
		Items:               batchItems(ri.items, qb.Start, end),
		BatchIndex:          qb.Index,
		BatchStart:          qb.Start,
		ItemsTotal:          qb.Total,
		Threads:             c.Threads,
		MemoryLimit:         c.MemoryBytes,
		MemoryTolerance:     b.tolerance,
		ScratchDir:          c.ScratchDir,
		ScratchBytes:        c.ScratchBytes,
		GPUSlots:            c.GPUSlots,
		GPUID:               c.GPUID,
		GPUMemoryLimit:      c.GPUMemoryBytes,
		GPUMemory:           b.gpuMemory,
		Timeout:             qb.Timeout,
		LogPath:             ri.logPath,
		LogMaxBytes:         b.logMax,
		PidsMax:             b.pidsMax,
		RunDir:              ri.runDir,
		Spares:              b.spares,
		KillGrace:           b.killGrace,
		Attempt:             qb.Attempt,
		Cgroup:              b.cgroups,
		User:                ri.user,
		Pod:                 ri.pod,
	}
	if spec.Items == nil {
		spec.ItemCount = end - qb.Start
	}
	if b.onProgress != nil {
		task, gen, index := qb.Task, qb.Generation, qb.Index
		spec.OnProgress = func(n int64) {
			b.onProgress(progressNote{task: task, generation: gen, index: index, items: n})
		}
	}
	// A batch of this task that was cancelled (its manifest deleted or
	// renamed away, and back) may still have processes in its kill grace:
	// the same items never run twice at once.
	if err := b.waitGone(ctx, qb.Task); err != nil {
		return nil, err
	}
	if b.stateDir != "" {
		if err := makeStateDir(b.stateDir); err != nil {
			return nil, runner.NewPrepareError(fmt.Errorf("task %q: %w", qb.Task, err))
		}
	}
	input := inputBytes(spec.Items)
	exec := b.exec
	if exec == nil {
		exec = runner.Processes{}
	}
	rb, err := exec.Start(ctx, spec)
	if err != nil {
		if errors.Is(err, runner.ErrCommandNotFound) {
			return nil, startError{reason: v1alpha1.ReasonCommandNotFound, err: err}
		}
		return nil, err
	}
	// A batch that is no process group of this machine (a Pod) leaves
	// nothing here for a restarted controller to kill.
	group := rb.Group()
	hasGroup := group.PGID > 0
	if hasGroup && b.onGroup != nil {
		b.onGroup(groupNote{task: qb.Task, group: group})
	}
	if hasGroup {
		if err := b.journal.started(qb.Task, group); err != nil {
			rb.Cancel()
			<-rb.Done() // its cgroup handed back too
			return nil, runner.NewPrepareError(fmt.Errorf("task %q: recording the process group: %w", qb.Task, err))
		}
	}
	b.mu.Lock()
	b.mu.running[rb] = qb
	b.mu.live[qb.Task]++
	b.mu.Unlock()
	b.cleanups.Add(1)
	go func() {
		defer b.cleanups.Done()
		<-rb.Done()
		if hasGroup {
			_ = b.journal.ended(group)
		}
		b.mu.Lock()
		delete(b.mu.running, rb)
		if b.mu.live[qb.Task]--; b.mu.live[qb.Task] == 0 {
			delete(b.mu.live, qb.Task)
			if b.mu.forgotten[qb.Task] {
				// The task was deleted while this batch ended.
				delete(b.mu.forgotten, qb.Task)
				b.lockedRemoveItemsFiles(qb.Task)
			}
		}
		close(b.mu.liveCh)
		b.mu.liveCh = make(chan struct{})
		b.mu.Unlock()
	}()
	return runningBatch{rb, input}, nil
}

// waitGone returns once no batch of the task has processes left, or with
// ctx's error.
func (b *batchRunner) waitGone(ctx context.Context, task string) error {
	for {
		b.mu.Lock()
		n, ch := b.mu.live[task], b.mu.liveCh
		b.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("task %q: waiting for a cancelled batch's processes to end: %w", task, context.Cause(ctx))
		}
	}
}

// batchItems are the items [lo, hi) of a batch for its runner.Spec: the
// paths, or nil for a count's range, which the runner writes as decimals
// (Spec.ItemCount): no string made per item, a batch may hold millions.
func batchItems(l v1alpha1.ItemList, lo, hi int64) []string {
	if l.Paths() == nil {
		return nil
	}
	return l.Range(lo, hi)
}

// inputBytes is the total size of the items that are regular files.
func inputBytes(items []string) int64 {
	var n int64
	for _, it := range items {
		if !filepath.IsAbs(it) {
			continue
		}
		if st, err := os.Stat(it); err == nil && st.Mode().IsRegular() {
			n += st.Size()
		}
	}
	return n
}

// StateDirEnv names the variable every batch process carries: the absolute
// state directory of the controller that started it. A restarted
// controller finds by it what a crashed one left, even a batch killed
// between its start and its group record, or a process that left the group.
const StateDirEnv = "LARDON3D_STATE_DIR"

// workMemory is the resident memory of every running batch, at their last
// samples: the governor's WorkMemoryUsage.
func (b *batchRunner) workMemory() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sum int64
	for rb := range b.mu.running {
		sum += rb.MemoryBytes()
	}
	return sum
}

// startError names the reason a batch could not start, for the queue.
type startError struct {
	reason string
	err    error
}

func (e startError) Error() string  { return e.err.Error() }
func (e startError) Unwrap() error  { return e.err }
func (e startError) Reason() string { return e.reason }

// runningBatch adapts a runner.Execution to queue.RunningBatch.
type runningBatch struct {
	b     runner.Execution
	input int64 // bytes of the batch's items that are files
}

func (r runningBatch) Pause() error  { return r.b.Pause() }
func (r runningBatch) Resume() error { return r.b.Resume() }
func (r runningBatch) Cancel()       { r.b.Cancel() }
func (r runningBatch) Wait() queue.BatchResult {
	res := r.b.Wait()
	return queue.BatchResult{
		ExitCode:            res.ExitCode,
		Reason:              res.Reason,
		Message:             res.Message,
		PeakMemoryBytes:     res.PeakMemoryBytes,
		PeakWorkingSetBytes: res.PeakWorkingSetBytes,
		PeakGPUMemoryBytes:  res.PeakGPUMemoryBytes,
		GPUMemoryMeasured:   res.GPUMemoryMeasured,
		InputBytes:          r.input,
		Started:             res.Started,
		Ended:               res.Ended,
	}
}

// runInfoFor builds a task's runInfo from its spec.
func runInfoFor(t *v1alpha1.Task, user *runner.User, spoolDir, stateDir string, items v1alpha1.ItemList) *runInfo {
	env := make([]runner.EnvVar, 0, len(t.Spec.Env))
	for _, e := range t.Spec.Env {
		env = append(env, runner.EnvVar{Name: e.Name, Value: e.Value})
	}
	name := t.Metadata.Name
	var inputPerItem float64
	if paths := items.Paths(); len(paths) > 0 {
		inputPerItem = float64(inputBytes(paths)) / float64(len(paths))
	}
	var containerWorkDir string
	if filepath.IsAbs(t.Spec.WorkingDir) {
		containerWorkDir = t.Spec.WorkingDir
	}
	return &runInfo{
		containerWorkDir: containerWorkDir,
		mark:             runner.EnvVar{Name: StateDirEnv, Value: stateDir},
		inputPerItem:     inputPerItem,
		command:          t.Spec.Command,
		env:              env,
		workDir:          v1alpha1.ResolveWorkingDir(t.Spec, spoolDir),
		items:            items,
		user:             user,
		pod:              t.Spec.Pod.DeepCopy(),
		logPath:          TaskLogPath(stateDir, name),
		runDir:           filepath.Join(stateDir, "run"),
	}
}
