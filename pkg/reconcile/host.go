package reconcile

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
)

// Host is the machine one controller governs, shared by every spool it
// serves: the governor, the prober, the queue (one arrival order across
// spools), the learned history and the scratch leases. Each spool added
// (Add) keeps a Controller of its own: its manifests, their statuses, its
// state directory, index and logs.
//
// The queue knows a task of the spool added n-th (n > 0) as "n\x1fNAME"
// (spoolPrefix), the first spool's as NAME: a task's dependencies are
// looked up in its own spool only, and the queue's events and batches are
// routed back to the spool's controller with the prefix cut off.
type Host struct {
	cfg     Config
	log     zerolog.Logger
	gov     *governor.Governor
	queue   *queue.Queue
	prober  *prober
	scratch *scratch.Leases
	cgroups *cgroup.Tree
	// exec runs every spool's batches (Deps.Executor).
	exec runner.Executor
	// gpuMem measures the batches' GPU memory (Deps.GPUMemory).
	gpuMem  runner.GPUMemoryReader
	metrics Metrics
	book    *history.Book
	// holds are the exec holds (holds.go).
	holds *holdBook
	// store persists the book; opened by Run (nil: memory only).
	store *history.Store
	// historyMu guards store once Run opened it: appendHistory replaces
	// a store whose file was damaged or removed.
	historyMu sync.Mutex
	// spools are the controllers, in the order added (Add before Run,
	// Join while it runs), guarded by spoolsMu with the rest of Run's
	// bookkeeping: the router, the prober and the learner read it.
	spoolsMu sync.RWMutex
	spools   []*Controller
	// running is set while Run accepts spools (Join); loopCtx ends their
	// loops, loops counts them, loopErrs carries each loop's end.
	running  bool
	loopCtx  context.Context
	loops    int
	loopErrs chan error
	// leaving counts the spools finishing their Leave: Run waits for them.
	leaving sync.WaitGroup
	// runningNow is closed once Run accepts spools (Started).
	runningNow chan struct{}
	// seq is the last arrival number handed out, across spools.
	seq atomic.Int64
	// learned counts the batches the learner recorded: a controller whose
	// published estimates are older publishes them again.
	learned atomic.Int64

	mu struct {
		sync.Mutex
		// reports are what each spool last reported, by index.
		reports []spoolReport
	}
	// settled is closed once every spool is settled (ExitWhenDone).
	settled     chan struct{}
	settledOnce sync.Once
	// listed is closed once every spool's first listing is in the queue
	// (noteListed): the queue dispatches from then on.
	listed     chan struct{}
	listedOnce sync.Once
}

// spoolReport is what a spool reported to the host: its phase counts, its
// readiness, and whether it is settled (ExitWhenDone) with how many
// manifests.
type spoolReport struct {
	phases  map[v1alpha1.Phase]int
	ready   bool
	settled bool
	seen    int
	listed  bool
}

// NewHost builds the machine part of a controller from cfg's machine-wide
// fields (Queue, ProbeInterval, KillGrace, ProvisionalFraction,
// ProvisionalBytes, BatchPolicy, HistoryPath, ExitWhenDone, WaitForTasks)
// and deps (all but Spool). Add the spools, then Run.
func NewHost(cfg Config, deps Deps) *Host {
	cfg = cfg.withDefaults()
	h := &Host{
		cfg:     cfg,
		log:     deps.Logger,
		gov:     deps.Governor,
		cgroups: deps.Cgroups,
		exec:    deps.Executor,
		gpuMem:  deps.GPUMemory,
		metrics: deps.Metrics,
		settled: make(chan struct{}),
		listed:  make(chan struct{}),

		runningNow: make(chan struct{}),
	}
	if h.metrics == nil {
		h.metrics = noMetrics{}
	}
	h.scratch = deps.Scratch
	if h.scratch == nil {
		h.scratch = scratch.New(cfg.SpoolDir, nil, deps.Logger)
	}
	h.prober = newProber(deps.Governor, deps.Snapshot, h.workMemory, deps.Logger, nil, cfg.ProbeInterval)
	h.holds = newHoldBook()
	adm := &machine{gov: deps.Governor, kick: h.prober.Kick, fresh: h.prober.WaitFresh, snapshots: h.prober, decisions: h.metrics, leases: h.scratch, holds: h.holds}
	h.book = history.NewBook(history.DefaultMaxRecords, history.Params{})
	l := &learner{
		book: h.book, gov: deps.Governor,
		provisional: cfg.ProvisionalFraction, provisionalBytes: cfg.ProvisionalBytes,
		efficient: cfg.BatchPolicy != BatchLargest,
		persist:   h.persist,
		now:       time.Now,
	}
	qcfg := cfg.Queue
	qcfg.LargestBatches = cfg.BatchPolicy == BatchLargest
	h.queue = queue.New(qcfg, adm, batchRouter{h}, observerFunc(h.observe), queue.WithLearner(l))
	h.prober.busy = h.queue.Busy
	ev := &evictor{gov: deps.Governor, candidates: h.evictionCandidates, evict: h.queue.Evict, top: func() []string { return topOutside(deps.MemoryDomain) }, log: deps.Logger, now: time.Now}
	if m, ok := h.metrics.(interface{ ObserveEviction() }); ok {
		ev.observed = m.ObserveEviction
	}
	h.prober.afterUpdate = func() { ev.step() }
	return h
}

// Add adds a spool: cfg's per-spool fields (SpoolDir, StateDir, the write
// delays, MemoryTolerance, CommitBeforeNextBatch) and the spool's watcher.
// REQUIRES: before Run (then Join).
func (h *Host) Add(cfg Config, sp Spool) *Controller {
	c := h.newController(cfg, sp)
	h.spoolsMu.Lock()
	defer h.spoolsMu.Unlock()
	h.lockedRegister(c)
	return c
}

// Join adds a spool to a running host (one a pattern found later): its
// state directory is prepared first (what a crashed controller of this
// spool left is killed, by its records only: the batches of the other
// spools run in the same cgroup subtree), then it takes its place and its
// loop starts. It fails, leaving nothing behind, once Run stops.
func (h *Host) Join(cfg Config, sp Spool) (*Controller, error) {
	c := h.newController(cfg, sp)
	c.log = c.log.With().Str("spool", c.cfg.SpoolDir).Logger()
	// No lock across the files and kills: the queue's router reads spools.
	if err := c.prepare(false); err != nil {
		return nil, err
	}
	h.spoolsMu.Lock()
	defer h.spoolsMu.Unlock()
	if !h.running {
		c.batches.journal.close()
		return nil, errors.New("the controller is not running")
	}
	h.lockedRegister(c)
	h.lockedStartLoop(c)
	return c, nil
}

// lockedStartLoop starts a spool's loop. REQUIRES: spoolsMu held, running.
func (h *Host) lockedStartLoop(c *Controller) {
	c.started = true
	h.loops++
	ctx, errs := h.loopCtx, h.loopErrs
	c.leave.done = make(chan struct{})
	go func() {
		if err, hand := h.loopEnded(c, c.loop(ctx)); hand {
			errs <- err
		}
	}()
}

// newController builds a spool's controller, not yet in its place.
func (h *Host) newController(cfg Config, sp Spool) *Controller {
	cfg = cfg.withDefaults()
	c := &Controller{
		cfg:   cfg,
		log:   h.log,
		host:  h,
		spool: sp,
		inbox: newInbox(),
		tasks: newTaskTable(),
	}
	c.resolver = &resolver{spoolDir: cfg.SpoolDir, stateDir: cfg.StateDir, requests: newInbox(),
		answer: func(r itemsResolved) { c.inbox.push(r) }, listed: func() { c.inbox.push(listedMark{}) }}
	c.batches = newBatchRunner(cfg.KillGrace, cfg.MemoryTolerance, func(n groupNote) { c.inbox.push(n) })
	c.batches.commitFirst = cfg.CommitBeforeNextBatch
	c.batches.logMax = max(cfg.LogMaxBytes, 0)
	c.batches.pidsMax = max(cfg.PidsMax, 0)
	c.batches.runDir = filepath.Join(cfg.StateDir, "run")
	c.batches.stateDir = cfg.StateDir
	c.batches.onProgress = func(n progressNote) { c.inbox.push(n) }
	c.batches.cgroups = h.cgroups
	c.batches.exec = h.exec
	c.batches.scratch = h.scratch
	c.batches.gpuMemory = h.gpuMem
	return c
}

// lockedRegister gives c its place: its index, its view of the queue and
// of the metrics. REQUIRES: spoolsMu held.
func (h *Host) lockedRegister(c *Controller) {
	c.idx = len(h.spools)
	c.queue = spoolQueue{q: h.queue, prefix: spoolPrefix(c.idx)}
	c.metrics = spoolMetrics{Metrics: h.metrics, h: h, idx: c.idx}
	h.spools = append(h.spools, c)
	h.mu.Lock()
	h.mu.reports = append(h.mu.reports, spoolReport{})
	h.mu.Unlock()
}

// spoolPrefix is what the queue's name of a task of the idx-th spool
// starts with.
func spoolPrefix(idx int) string {
	if idx == 0 {
		return ""
	}
	return strconv.Itoa(idx) + "\x1f"
}

// route finds the controller of a queue task name and the task's own name.
func (h *Host) route(name string) (*Controller, string) {
	h.spoolsMu.RLock()
	defer h.spoolsMu.RUnlock()
	i := strings.IndexByte(name, '\x1f')
	if i < 0 {
		return h.spools[0], name
	}
	n, err := strconv.Atoi(name[:i])
	if err != nil || n <= 0 || n >= len(h.spools) {
		return nil, name
	}
	return h.spools[n], name[i+1:]
}

// plainName is a queue task name without its spool prefix.
func plainName(name string) string {
	if i := strings.IndexByte(name, '\x1f'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// observe routes a queue event to its spool's controller.
func (h *Host) observe(e queue.Event) {
	c, name := h.route(e.Task)
	if c == nil {
		h.log.Error().Str("task", e.Task).Msg("queue event of an unknown spool (bug)")
		return
	}
	if name != e.Task {
		e.Task = name
		e.Message = strings.ReplaceAll(e.Message, spoolPrefix(c.idx), "")
		if e.Batch != nil {
			b := *e.Batch
			b.Task = name
			e.Batch = &b
		}
	}
	c.inbox.push(e)
}

// persist hands a measured batch to the first spool's controller, whose
// goroutine appends it to the store. It never blocks (the queue's mutex is
// held).
func (h *Host) persist(e history.Entry) {
	h.learned.Add(1)
	h.spoolsMu.RLock()
	first := h.spools[0]
	h.spoolsMu.RUnlock()
	first.inbox.push(e)
}

// workMemory is what the running batches of every spool use.
func (h *Host) workMemory() int64 {
	h.spoolsMu.RLock()
	defer h.spoolsMu.RUnlock()
	var sum int64
	for _, c := range h.spools {
		sum += c.batches.workMemory()
	}
	return sum
}

// multiSpool reports whether the host serves several spools: one that is
// lost then stops alone.
func (h *Host) multiSpool() bool {
	h.spoolsMu.RLock()
	defer h.spoolsMu.RUnlock()
	return len(h.spools) > 1
}

// nextSeq hands out the next arrival number.
func (h *Host) nextSeq() int64 { return h.seq.Add(1) }

// Drain, on, starts no batch on this machine any more and lets those in
// flight end: at its next batch boundary each task is left Pending
// (reason Draining) with its committed progress, and its status written
// as any other (queue.Queue.Drain). Drain(false) dispatches again. Safe
// from any goroutine.
func (h *Host) Drain(on bool) { h.queue.Drain(on) }

// Working reports how many tasks hold a worker: a drain is complete at 0.
func (h *Host) Working() int { return h.queue.Working() }

// seenSeq notes an arrival number a status carries, so that later arrivals
// come after it.
func (h *Host) seenSeq(v int64) {
	for {
		cur := h.seq.Load()
		if v <= cur || h.seq.CompareAndSwap(cur, v) {
			return
		}
	}
}

// batchRouter is the queue's BatchRunner: it starts a batch through its
// spool's controller.
type batchRouter struct{ h *Host }

// Start starts the batch of the task's spool.
func (r batchRouter) Start(ctx context.Context, b queue.Batch) (queue.RunningBatch, error) {
	c, name := r.h.route(b.Task)
	if c == nil {
		return nil, fmt.Errorf("task %q: unknown spool", b.Task)
	}
	b.Task = name
	return c.batches.Start(ctx, b)
}

// taskQueue is what a spool's controller asks of the shared queue.
type taskQueue interface {
	Replace(t queue.Task) (queue.Replaced, error)
	Remove(name string) error
	Holds(name string) bool
	SetPaused(name string, paused bool) error
}

// spoolQueue is the shared queue seen from one spool: names carry the
// spool's prefix.
type spoolQueue struct {
	q      *queue.Queue
	prefix string
}

func (s spoolQueue) Replace(t queue.Task) (queue.Replaced, error) {
	if s.prefix != "" {
		t.Name = s.prefix + t.Name
		deps := make([]string, len(t.DependsOn))
		for i, d := range t.DependsOn {
			deps[i] = s.prefix + d
		}
		t.DependsOn = deps
	}
	return s.q.Replace(t)
}

func (s spoolQueue) Remove(name string) error { return s.q.Remove(s.prefix + name) }
func (s spoolQueue) Holds(name string) bool   { return s.q.Holds(s.prefix + name) }
func (s spoolQueue) SetPaused(name string, paused bool) error {
	return s.q.SetPaused(s.prefix+name, paused)
}

// spoolMetrics reports one spool's phase counts and readiness into the
// machine's totals.
type spoolMetrics struct {
	Metrics
	h   *Host
	idx int
}

// SetPhases reports the spool's counts; the gauge gets every spool's sum.
func (m spoolMetrics) SetPhases(counts map[v1alpha1.Phase]int) {
	m.h.mu.Lock()
	m.h.mu.reports[m.idx].phases = counts
	sum := make(map[v1alpha1.Phase]int)
	for _, r := range m.h.mu.reports {
		for p, n := range r.phases {
			sum[p] += n
		}
	}
	m.h.mu.Unlock()
	m.Metrics.SetPhases(sum)
}

// SetReady reports the spool listed; the controller is ready once every
// spool is.
func (m spoolMetrics) SetReady(ready bool) {
	m.h.mu.Lock()
	m.h.mu.reports[m.idx].ready = ready
	all := true
	for _, r := range m.h.mu.reports {
		all = all && r.ready
	}
	m.h.mu.Unlock()
	m.Metrics.SetReady(all)
}

// noteSettled records whether a spool is settled and how many manifests
// it saw; once every spool is, with WaitForTasks manifests in all, Run
// stops (ExitWhenDone).
func (h *Host) noteSettled(idx int, settled bool, seen int) {
	h.mu.Lock()
	h.mu.reports[idx].settled, h.mu.reports[idx].seen = settled, seen
	all, total := true, 0
	for _, r := range h.mu.reports {
		all = all && r.settled
		total += r.seen
	}
	h.mu.Unlock()
	if all && total >= h.cfg.WaitForTasks {
		h.settledOnce.Do(func() { close(h.settled) })
	}
}

// noteListed records that a spool's first listing is in the queue (or
// that the spool was lost before it was); once every spool's is, the
// queue dispatches.
func (h *Host) noteListed(idx int) {
	h.mu.Lock()
	h.mu.reports[idx].listed = true
	all := true
	for _, r := range h.mu.reports {
		all = all && r.listed
	}
	h.mu.Unlock()
	if all {
		h.listedOnce.Do(func() { close(h.listed) })
	}
}

// Run runs every spool's controller until ctx ends or, with ExitWhenDone,
// until every task of every spool is settled. On return every batch has
// been stopped, every reservation released, and every status written.
func (h *Host) Run(ctx context.Context) (Outcome, error) {
	h.spoolsMu.RLock()
	spools := slices.Clone(h.spools)
	h.spoolsMu.RUnlock()
	if len(spools) == 0 {
		return Outcome{}, errors.New("no spool to serve")
	}
	for i, c := range spools {
		if len(spools) > 1 {
			c.log = c.log.With().Str("spool", c.cfg.SpoolDir).Logger()
		}
		if err := c.prepare(true); err != nil {
			for _, p := range spools[:i] {
				p.batches.journal.close()
			}
			return Outcome{}, err
		}
	}
	historyPath := h.cfg.HistoryPath
	if historyPath == "" {
		historyPath = filepath.Join(spools[0].cfg.StateDir, history.FileName)
	}
	var stateDirs []string
	for _, c := range spools {
		stateDirs = append(stateDirs, c.cfg.StateDir)
	}
	h.store = openHistory(historyPath, h.book, h.log, stateDirs...)
	defer func() {
		if h.store != nil {
			_ = h.store.Close()
		}
	}()
	stopMachine := h.startMachine()
	queueCtx, stopQueue := context.WithCancel(context.Background())
	defer stopQueue()
	queueDone := make(chan error, 1)
	go func() {
		// The queue dispatches once every spool's first listing is in it,
		// as an informer's workers start once its cache is synced: a first
		// decision made while the listing still arrives sees one task, and
		// holds its batch to no share of memory (20 tasks of 64 items
		// dropped at once: the first ran all 64 in 4.3 GiB, the one beside
		// it got 13 items a batch).
		select {
		case <-h.listed:
			queueDone <- h.queue.Run(queueCtx)
		case <-queueCtx.Done():
			queueDone <- queueCtx.Err()
		}
	}()

	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	h.spoolsMu.Lock()
	h.running, h.loopCtx, h.loopErrs = true, loopCtx, make(chan error)
	for _, c := range spools {
		h.lockedStartLoop(c)
	}
	close(h.runningNow)
	h.spoolsMu.Unlock()
	var runErr error
	ended := 0
	select {
	case <-ctx.Done():
	case <-h.settled:
	case runErr = <-h.loopErrs:
		ended++
	}
	stopLoops()
	h.spoolsMu.Lock()
	h.running = false // no Join from now on
	loops := h.loops
	spools = slices.Clone(h.spools)
	h.spoolsMu.Unlock()
	for ; ended < loops; ended++ {
		if err := <-h.loopErrs; err != nil && runErr == nil {
			runErr = err
		}
	}
	h.leaving.Wait() // a spool that left finished its statuses

	// Shutdown: stop dispatching and running, then write what is left.
	closeCtx, cancel := context.WithTimeout(context.Background(), h.cfg.KillGrace+5*time.Second)
	defer cancel()
	if err := h.queue.Close(closeCtx); err != nil && !errors.Is(err, queue.ErrClosed) {
		h.log.Warn().Err(err).Msg("closing the queue")
	}
	stopQueue()
	<-queueDone
	for _, c := range spools {
		c.batches.cleanups.Wait() // every batch cgroup handed back, every end journaled
	}
	stopMachine()
	var out Outcome
	out.AllDone = true
	for _, c := range spools {
		if c.batches.journal != nil {
			defer c.batches.journal.close()
		}
		if !c.started {
			continue // joined, never run
		}
		o := c.finish()
		out.AllDone = out.AllDone && o.AllDone
		out.Refused += o.Refused
		out.Tasks = append(out.Tasks, o.Tasks...)
	}
	sort.SliceStable(out.Tasks, func(i, j int) bool { return out.Tasks[i].Metadata.Name < out.Tasks[j].Metadata.Name })
	return out, runErr
}

// startMachine removes what a crashed controller left on the scratch
// volumes and starts the prober and the lease remover. stop, called once
// the queue closed, ends both and returns once every released lease's
// directory is removed. It does not wait for a probe in flight (nvidia-smi
// may take its whole timeout): the prober exits after it, and an Update of
// the closed governor changes nothing.
func (h *Host) startMachine() (stop func()) {
	if n, err := h.scratch.RemoveLeftovers(); n > 0 || err != nil {
		h.log.Info().Int("removed", n).AnErr("error", err).Msg("scratch lease directories of a previous controller")
	}
	h.prober.freed = func() { h.queue.Wake(); h.holds.kick() }
	ctx, cancel := context.WithCancel(context.Background())
	go h.prober.run(ctx)
	removed := make(chan struct{})
	go func() { defer close(removed); h.scratch.Run(ctx) }()
	return func() {
		cancel()
		<-removed
	}
}
