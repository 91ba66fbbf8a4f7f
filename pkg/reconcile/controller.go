package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// DefaultQueuedWriteDelay is Config.QueuedWriteDelay's default.
const DefaultQueuedWriteDelay = 3 * time.Second

// Config tunes the controller.
type Config struct {
	// SpoolDir is the watched directory.
	SpoolDir string
	// StateDir holds logs and items files (default SpoolDir/.lardon3d).
	StateDir string
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
	// once, with its phase change, so that thousands of short tasks
	// dropped at once are not each written twice. Any other reason to
	// wait, and any phase change, is written as usual.
	QueuedWriteDelay time.Duration
	// ExitWhenDone makes Run return once every task is settled.
	ExitWhenDone bool
	// WaitForTasks, with ExitWhenDone, keeps Run going until at least this
	// many manifests were seen: a script may start the controller first
	// and drop its files after.
	WaitForTasks int
	// KillGrace is the SIGTERM→SIGKILL delay on cancel (default 10 s).
	KillGrace time.Duration
	// MemoryTolerance is how far a batch may exceed its memory contract
	// before it is killed (default 0.10).
	MemoryTolerance float64
	// Queue configures the queue.
	Queue queue.Config
	// ProbeInterval is how often the machine is probed (default 200 ms).
	ProbeInterval time.Duration
	// ProvisionalFraction is the share of the grantable memory the first
	// batch of a task with no estimate and no history reserves (default
	// 0.25), clamped to what is free; ProvisionalBytes, when > 0, is used
	// instead.
	ProvisionalFraction float64
	ProvisionalBytes    int64
	// BatchPolicy chooses among the batches that fit: BatchLargest (the
	// default) or BatchEfficient (the least predicted time per item, once
	// a profile's batches showed larger ones cost more per item).
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

// Metrics is what the controller reports to; nil-safe use through noMetrics.
type Metrics interface {
	DecisionObserver
	// ObserveBatch records a finished batch.
	ObserveBatch(class string, d time.Duration, peakBytes int64)
	// ObserveStatusWrite records the latency of one status write.
	ObserveStatusWrite(d time.Duration, err error)
	// ObservePhaseRefused counts a phase transition the table forbids.
	ObservePhaseRefused(from, to v1alpha1.Phase)
	// SetPhases replaces the count of tasks per phase.
	SetPhases(counts map[v1alpha1.Phase]int)
	// SetReady reports that the spool was listed once.
	SetReady(ready bool)
}

// waitNumbersInterval bounds how often a waiting task's status is written
// when only the numbers of its reason's message changed.
const waitNumbersInterval = 10 * time.Second

// Spool is what the controller needs of the spool directory; *spool.Spool
// is one.
type Spool interface {
	// Run watches the directory until ctx ends; Events carries what it sees.
	Run(ctx context.Context) error
	// Events is closed when Run returns.
	Events() <-chan spool.Event
	// WriteStatus writes a task's status into its manifest.
	WriteStatus(path string, status *v1alpha1.TaskStatus) error
}

// Deps are the parts the controller joins.
type Deps struct {
	// Spool owns the directory.
	Spool Spool
	// Governor owns the budgets.
	Governor *governor.Governor
	// Snapshot probes the machine; only the prober's goroutine calls it.
	Snapshot SnapshotFunc
	// Scratch creates and removes scratch lease directories; optional.
	Scratch *scratch.Leases
	// Cgroups, optional, is the subtree under which each batch gets a
	// cgroup of its own (the kernel enforces its memory limit and knows
	// every process it started); nil runs batches under the RSS sampler.
	Cgroups *cgroup.Tree
	// Metrics, optional.
	Metrics Metrics
	// Logger for transitions.
	Logger zerolog.Logger
}

// Controller is the reconcile loop of one spool.
type Controller struct {
	cfg Config
	log zerolog.Logger
	// host is the machine the spool shares with the others the process
	// serves; idx is the spool's place in it.
	host    *Host
	idx     int
	spool   Spool
	queue   taskQueue
	batches *batchRunner
	metrics Metrics
	inbox   *inbox

	// Owned by the Run goroutine.
	// pendingHistory are records waiting for the store; estimatesDirty
	// says the published estimates are stale.
	pendingHistory []history.Entry
	estimatesDirty bool
	// estimatesLearned is the host's learned count the published
	// estimates include.
	estimatesLearned int64
	// historyAt is when the pending records were last appended.
	historyAt time.Time

	// Owned by the Run goroutine.
	entries map[string]*entry // by path
	byName  map[string]string // name → path of the file that owns it
	invalid map[string]error  // path → why it is not a task (syntax, refused)
	dirty   map[string]struct{}
	// due orders the dirty statuses by due time (duewrites.go); marked
	// are the entries marked dirty since the last flush, pushed onto it
	// then (their due time is known once the event is applied whole).
	due    dueQueue
	marked []*entry
	// duePopped counts the items flush popped (tests).
	duePopped int
	synced    bool
	// refused counts the phase transitions setPhase refused (bugs).
	refused int
	// writeErrorsChanged: the set of failing status writes changed since
	// it was last published for describe.
	writeErrorsChanged bool
	// index is what get lists (index.go).
	index listIndex
	// closing is set once Run shuts down: no task is cancelled any more.
	closing bool
	// runAs runs the spool's tasks (spoolUser), set by prepare.
	runAs *runner.User
	// started is set once the host started the loop (Host.spoolsMu).
	started bool
	// stopSpool ends the spool's watcher; spoolErr is its result.
	stopSpool func()
	spoolErr  chan error
	// phasesAt is when the phase gauge was last recounted; phasesStale
	// says a phase changed, or an entry came or went, since.
	phasesAt    time.Time
	phasesStale bool
}

// entry is one manifest the controller knows.
type entry struct {
	path   string
	name   string
	task   *v1alpha1.Task // last parsed version of the file
	status v1alpha1.TaskStatus
	// appliedHash is the spec hash of the generation the queue runs; it can
	// differ from the file's when an edit waits for the task to stop.
	appliedHash string
	fileHash    string
	// owner runs the task's batches (nil: the controller's user): the
	// spool's owner, for a controller running as root (spoolUser).
	owner       *runner.User
	inQueue     bool
	duplicateOf string
	// urgentAt is when the oldest unwritten phase change happened (zero:
	// none); lastWrite when the status was last written.
	urgentAt  time.Time
	lastWrite time.Time
	// queuedUntil, for a new manifest never written and only queued, is
	// when its first write is due at the latest (Config.QueuedWriteDelay).
	queuedUntil time.Time
	// dueItemAt is the time of the entry's live item in Controller.due
	// (zero: none).
	dueItemAt time.Time
	// waitNumbersAt is when a wait whose reason stayed, with new numbers
	// in its message, was last scheduled for a write.
	waitNumbersAt time.Time
	// commit is set when committed progress awaits its write: no grace.
	commit bool
	// parseErr is the validation error of the file's last version (nil
	// when valid).
	parseErr error
	// writeErr is the last status write's error; writeFailures counts the
	// failures in a row, retryAt is when the next attempt is due.
	writeErr      error
	writeFailures int
	retryAt       time.Time
	failingSince  time.Time
}

// sameStatus reports whether two statuses read the same once written (the
// file keeps times to the second).
func sameStatus(a, b *v1alpha1.TaskStatus) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// editPending reports whether the file holds a spec the task has not
// taken: a changed spec, or an invalid one not yet rejected.
func (e *entry) editPending() bool {
	return e.fileHash != e.appliedHash || (e.parseErr != nil && e.status.Phase != v1alpha1.PhaseRejected)
}

// New builds the controller of a process that serves one spool; Run
// starts it. A process that serves several builds a Host and Adds them.
func New(cfg Config, deps Deps) *Controller {
	return NewHost(cfg, deps).Add(cfg, deps.Spool)
}

// withDefaults fills the unset fields of cfg.
func (cfg Config) withDefaults() Config {
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(cfg.SpoolDir, ".lardon3d")
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
	if cfg.MemoryTolerance <= 0 {
		cfg.MemoryTolerance = 0.10
	}
	if cfg.ProvisionalFraction <= 0 || cfg.ProvisionalFraction > 1 {
		cfg.ProvisionalFraction = DefaultProvisionalFraction
	}
	return cfg
}

type observerFunc func(queue.Event)

func (f observerFunc) Observe(e queue.Event) { f(e) }

// Outcome summarises how Run ended.
type Outcome struct {
	// AllDone is true when every task ended Done and no manifest was invalid.
	AllDone bool
	// Tasks is the final status of every task, sorted by name.
	Tasks []*v1alpha1.Task
}

// Run runs the loop until ctx ends or, with ExitWhenDone, until every task is
// settled. On return every batch has been stopped, every reservation
// released, and every status written. It runs the whole host: call it on
// the controller New built, not on one a Host's Add did (run the Host).
func (c *Controller) Run(ctx context.Context) (Outcome, error) {
	return c.host.Run(ctx)
}

// prepare makes the state directory and kills what a crashed controller
// of this spool left, before anything runs again: the groups on record,
// and with sweep every batch cgroup under the subtree (false once other
// spools' batches run there).
//
// The files and directories inside are readable by the state directory's
// group (0640, 0750): the state directory itself says who may read (0700
// SPOOL/.lardon3d; a root controller's directory for another user's spool
// has that user's group).
func (c *Controller) prepare(sweep bool) error {
	if err := os.MkdirAll(c.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	for _, dir := range []string{filepath.Join(c.cfg.StateDir, "logs"), filepath.Join(c.cfg.StateDir, "run")} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
	}
	runAs, err := spoolUser(c.cfg.SpoolDir)
	if err != nil {
		return err
	}
	c.runAs = runAs
	killLeftovers(c.cfg.StateDir, c.batches.cgroups, sweep, c.log)
	c.batches.journal = newGroupJournal(filepath.Join(c.cfg.StateDir, "run"))
	c.estimatesDirty = true
	return nil
}

// loop is the owner goroutine while the host runs: it watches the spool
// and applies its events and the inbox's notes until ctx ends, or the
// spool stops (its error). With ExitWhenDone it tells the host whether the
// spool is settled after each pass.
func (c *Controller) loop(ctx context.Context) error {
	spoolCtx, stopSpool := context.WithCancel(context.Background())
	c.stopSpool = stopSpool
	c.spoolErr = make(chan error, 1)
	go func() { c.spoolErr <- c.spool.Run(spoolCtx) }()

	flush := time.NewTimer(time.Hour)
	defer flush.Stop()
	publish := time.NewTicker(2 * time.Second)
	defer publish.Stop()
	c.publishBudgets()
	defer func() { c.closing = true }()
	events, spoolErr := c.spool.Events(), c.spoolErr
	// lost ends the loop when the spool cannot be watched any more (its
	// directory removed or moved), unless other spools are served: then
	// only this one stops taking events (its batches end, their statuses
	// are retried), the others run on.
	lost := func(err error) error {
		if err == nil {
			err = errors.New("stopped")
		}
		err = fmt.Errorf("spool %s: %w", c.cfg.SpoolDir, err)
		if !c.host.multiSpool() {
			return err
		}
		c.log.Error().Err(err).Msg("this spool is not watched any more; the others are served on (restart the controller to serve it again)")
		events, spoolErr = nil, nil
		return nil
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				// The spool closes its events as Run returns: its error,
				// not the closed channel, is the cause.
				if err := lost(<-spoolErr); err != nil {
					return err
				}
				continue
			}
			c.takeEvent(ev)
			// Take what else is waiting before flushing: the writes due
			// together are then one group commit, not one each.
			c.drainEvents()
		case <-c.inbox.wake:
			c.applyInbox()
			c.drainEvents()
		case <-flush.C:
		case <-publish.C:
			c.flushHistory()
			c.publishBudgets()
			c.countPhases(time.Now(), false) // exact again once a burst of writes ends
			c.publishEstimates()
		case err := <-spoolErr:
			if err := lost(err); err != nil {
				return err
			}
			continue
		case <-ctx.Done():
			return nil
		}
		now := time.Now()
		next := c.flush(now, false)
		if next > 0 {
			flush.Reset(next)
		}
		if c.writeErrorsChanged {
			c.publishWriteErrors()
		}
		if c.host.cfg.ExitWhenDone {
			c.host.noteSettled(c.idx, c.synced && c.settled(), len(c.entries)+len(c.invalid))
		}
	}
}

// finish writes what is left once the queue closed and every batch is
// gone: the notes of their ends, the spool's last events, every status
// onto its file's current version; and removes what the running
// controller published.
func (c *Controller) finish() Outcome {
	c.closing = true
	c.applyInbox()
	// The spool's goroutine is gone before Run returns; the versions it
	// read last are applied (the queue is closed: only their statuses
	// matter now).
	c.stopSpool()
	for ev := range c.spool.Events() {
		if ev.Type != spool.Synced {
			c.handleFile(ev)
		}
	}
	c.applyInbox()
	// Every status is put back onto its file's current version: a writer
	// that replaced a whole file and dropped its status block just before
	// the stop must not make the next run start that task over. A file
	// that already holds it is not rewritten.
	for path := range c.entries {
		c.dirty[path] = struct{}{}
	}
	c.flush(time.Now(), true)
	c.countPhases(time.Now(), true)
	c.flushHistory()
	_ = os.Remove(filepath.Join(c.cfg.StateDir, estimatesFile))
	_ = os.Remove(filepath.Join(c.cfg.StateDir, budgetsFile))
	_ = os.Remove(filepath.Join(c.cfg.StateDir, writeErrorsFile))
	for _, e := range c.entries {
		if e.writeErr != nil {
			c.log.Error().Str("task", e.name).Str("file", e.path).Int("attempts", e.writeFailures).Err(e.writeErr).Msg("status still not written at shutdown; the next run resumes from the file's older status")
		}
	}
	return c.outcome()
}

// drainMax bounds how many waiting spool events one pass of Run takes
// before it flushes.
const drainMax = 1024

// takeEvent applies one spool event. REQUIRES: owner goroutine.
func (c *Controller) takeEvent(ev spool.Event) {
	if ev.Type == spool.Synced {
		c.synced = true
		c.metrics.SetReady(true)
		c.log.Info().Int("tasks", len(c.entries)).Str("spool", c.cfg.SpoolDir).Msg("spool listed")
		return
	}
	c.handleFile(ev)
}

// drainEvents applies the spool events and inbox notes already waiting
// (at most drainMax events), without blocking. A closed event channel is
// left to Run's select. REQUIRES: owner goroutine.
func (c *Controller) drainEvents() {
	for n := 0; n < drainMax; n++ {
		select {
		case ev, ok := <-c.spool.Events():
			if !ok {
				return
			}
			c.takeEvent(ev)
		case <-c.inbox.wake:
			c.applyInbox()
		default:
			return
		}
	}
}

// publishWriteErrors publishes the failing status writes for describe.
// REQUIRES: owner goroutine.
func (c *Controller) publishWriteErrors() {
	errs := make(map[string]WriteError)
	for _, e := range c.entries {
		if e.writeErr != nil {
			errs[e.name] = WriteError{File: e.path, Error: e.writeErr.Error(), Attempts: e.writeFailures, Since: e.failingSince}
		}
	}
	if err := publishWriteErrors(c.cfg.StateDir, errs); err != nil {
		c.log.Debug().Err(err).Msg("failing status writes not published")
		return
	}
	c.writeErrorsChanged = false
}

// publishBudgets publishes the governor's live view for the budgets verb.
func (c *Controller) publishBudgets() {
	if err := publishBudgets(c.cfg.StateDir, c.host.gov.Budgets(), time.Now()); err != nil {
		c.log.Debug().Err(err).Msg("budgets not published")
	}
}

// settled reports whether no task can make progress any more on its own
// (the rule --exit-when-done documents): every task is terminal, or
// Pending and waiting for a person: paused before admission (it holds
// nothing), held by a dependency that failed or is missing, or waiting for
// dependencies that are all settled and not all Done. A task paused with a
// batch stopped (phase Paused) is not settled: exiting would kill the
// batch. With WaitForTasks, fewer tasks than that are never settled.
// REQUIRES: owner goroutine.
func (c *Controller) settled() bool {
	if len(c.dirty) > 0 {
		return false
	}
	stuck := map[string]bool{} // settled, by task name
	var waiting []*entry       // Pending on dependencies still running
	for _, e := range c.entries {
		if v1alpha1.IsTerminal(e.status.Phase) {
			stuck[e.name] = true
			continue
		}
		if e.status.Phase != v1alpha1.PhasePending {
			return false
		}
		if adm := meta.FindStatusCondition(e.status.Conditions, v1alpha1.ConditionAdmitted); adm != nil &&
			adm.Status == metav1.ConditionFalse && adm.Reason == v1alpha1.ReasonPaused {
			stuck[e.name] = true
			continue
		}
		cond := meta.FindStatusCondition(e.status.Conditions, v1alpha1.ConditionDependenciesReady)
		switch {
		case cond == nil || cond.Status != metav1.ConditionFalse:
			return false
		case cond.Reason == v1alpha1.ReasonDependencyFailed || cond.Reason == v1alpha1.ReasonDependencyMissing:
			stuck[e.name] = true
		case cond.Reason == v1alpha1.ReasonWaitingForDependencies:
			waiting = append(waiting, e)
		default:
			return false
		}
	}
	// A task waiting only for settled tasks, one of them not Done, is
	// settled too (it waits for a paused one); to a fixed point.
	for changed := true; changed; {
		changed = false
		for _, e := range waiting {
			if stuck[e.name] || !c.waitsOnlyForSettled(e, stuck) {
				continue
			}
			stuck[e.name], changed = true, true
		}
	}
	for _, e := range waiting {
		if !stuck[e.name] {
			return false
		}
	}
	return true
}

// waitsOnlyForSettled reports whether every dependency of e is settled and
// at least one is not Done. REQUIRES: owner goroutine.
func (c *Controller) waitsOnlyForSettled(e *entry, stuck map[string]bool) bool {
	notDone := false
	for _, dep := range e.task.Spec.DependsOn {
		d := c.entries[c.byName[dep]]
		if d == nil || !stuck[dep] {
			return false
		}
		notDone = notDone || d.status.Phase != v1alpha1.PhaseDone
	}
	return notDone
}

func (c *Controller) outcome() Outcome {
	out := Outcome{AllDone: len(c.invalid) == 0}
	for _, e := range c.entries {
		t := *e.task
		t.Status = e.status
		out.Tasks = append(out.Tasks, &t)
		if e.status.Phase != v1alpha1.PhaseDone {
			out.AllDone = false
		}
	}
	sort.Slice(out.Tasks, func(i, j int) bool { return out.Tasks[i].Metadata.Name < out.Tasks[j].Metadata.Name })
	return out
}

// handleFile applies one spool event. REQUIRES: owner goroutine.
func (c *Controller) handleFile(ev spool.Event) {
	c.index.fileSeen(ev)
	switch ev.Type {
	case spool.Renamed:
		// The task moves with its file (batch, reservation and all); what
		// the new file holds is then applied as an edit.
		c.moveEntry(ev.OldPath, ev.Path)
	case spool.Deleted:
		delete(c.invalid, ev.Path)
		c.deleteEntry(ev.Path, "manifest deleted")
		return
	case spool.Invalid, spool.Refused:
		if _, known := c.invalid[ev.Path]; !known {
			c.log.Warn().Str("file", ev.Path).Err(ev.Err).Msg("manifest ignored")
		}
		c.invalid[ev.Path] = ev.Err
		if ev.Type == spool.Refused {
			c.deleteEntry(ev.Path, "manifest refused")
		}
		// A known task whose file was broken by an edit keeps running: the
		// file is never rewritten and is picked up again once fixed.
		return
	}
	delete(c.invalid, ev.Path)
	if ev.Task == nil {
		return
	}
	name := ev.Task.Metadata.Name
	e := c.entries[ev.Path]
	if e != nil && e.name != name {
		c.deleteEntry(ev.Path, "metadata.name changed")
		e = nil
	}
	if owner, taken := c.byName[name]; taken && owner != ev.Path {
		c.rejectDuplicate(ev, owner)
		return
	}
	if e == nil || e.fileHash != v1alpha1.SpecHash(ev.Task.Spec) {
		c.logWarnings(name, ev.Path, ev.Task)
	}
	if e == nil {
		e = &entry{path: ev.Path, name: name, status: ev.Task.Status}
		c.putEntry(ev.Path, e)
		c.byName[name] = ev.Path
		c.host.seenSeq(e.status.QueueSeq)
		e.owner = c.runAs
		c.first(e, ev.Task, ev.Err)
		return
	}
	e.owner = c.runAs
	c.edit(e, ev.Task, ev.Err)
}

// resolveItems resolves a task's items. For a task run as another user
// (spoolUser), every item that is a path must be one that user may read:
// the controller resolves them with its own rights, and must not hand the
// user's batch what only root reaches (neither a name nor a content).
func (c *Controller) resolveItems(e *entry, spec v1alpha1.TaskSpec) ([]string, error) {
	if e.owner == nil {
		return v1alpha1.ResolveItems(spec, c.cfg.SpoolDir)
	}
	// Globbed as the user too: a pattern lists only what the user may.
	var items []string
	err := runner.AsUser(e.owner, func() error {
		var err error
		if items, err = v1alpha1.ResolveItems(spec, c.cfg.SpoolDir); err != nil {
			return err
		}
		denied := 0
		for _, it := range items {
			if filepath.IsAbs(it) && e.owner.MayRead(it) != nil {
				denied++
			}
		}
		if denied > 0 {
			return fmt.Errorf("%d of %d items are not readable by uid %d, the spool's owner, as whom the task runs", denied, len(items), e.owner.UID)
		}
		return nil
	})
	return items, err
}

// spoolUser is who runs the tasks of a spool: nil (the controller's
// user) unless the controller runs as root and another user owns the spool
// directory; then that user, as atd and cron run a job as its owner
// (uid, gid, groups and HOME from the passwd database; a uid it does not
// know runs as that uid and the directory's gid, never as root). The spool
// accepts only files of that user and root: a root-owned manifest in a
// user's spool runs as the user too, since root cannot tell whether the
// user planted it there (a copy of a status write-back renamed away, a
// hard link).
func spoolUser(dir string) (*runner.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	if st.Uid == 0 {
		return nil, nil
	}
	u, err := runner.LookupUser(st.Uid, st.Gid)
	if err != nil {
		return &runner.User{UID: st.Uid, GID: st.Gid, Groups: []uint32{st.Gid}, Home: "/"}, nil
	}
	return u, nil
}

// moveEntry moves the task of the manifest at from to the path to (a
// rename), and schedules a status write there. REQUIRES: owner goroutine.
func (c *Controller) moveEntry(from, to string) {
	delete(c.invalid, from)
	e := c.entries[from]
	if e == nil {
		return
	}
	if d := c.entries[to]; d != nil {
		// The file moved onto one of the same task name (the spool emits no
		// deletion for it): of the two, the owner's task goes on.
		switch {
		case d.duplicateOf == from:
			c.dropEntry(to) // the duplicate's file is gone
			delete(c.dirty, to)
		case e.duplicateOf == to:
			c.dropEntry(from) // the owner's file holds the duplicate's text now: an edit
			delete(c.dirty, from)
			return
		default:
			return
		}
	}
	c.dropEntry(from)
	e.path = to
	c.putEntry(to, e)
	if c.byName[e.name] == from {
		c.byName[e.name] = to
	}
	delete(c.dirty, from)
	for _, d := range c.entries {
		if d.duplicateOf == from {
			d.duplicateOf = to
		}
	}
	c.log.Info().Str("task", e.name).Str("from", filepath.Base(from)).Str("to", filepath.Base(to)).Msg("manifest renamed")
	c.markDirty(e, true)
}

// first handles a manifest seen for the first time by this controller: a new
// task, or one a previous controller left (resume from committed progress).
func (c *Controller) first(e *entry, t *v1alpha1.Task, parseErr error) {
	hash := v1alpha1.SpecHash(t.Spec)
	e.task, e.fileHash, e.parseErr = t, hash, parseErr
	st := &e.status
	if st.ProcessGroup != nil {
		// The group was killed at start (killLeftovers) from the state file.
		st.ProcessGroup = nil
		c.markDirty(e, true)
	}
	if parseErr != nil {
		c.reject(e, hash, st.ObservedGeneration+1, parseErr)
		return
	}
	// A duplicate-name rejection belongs to the file's situation, not to its
	// spec: the name may be free now.
	dup := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionValid)
	if st.SpecHash == hash && st.Phase != "" && (dup == nil || dup.Reason != v1alpha1.ReasonDuplicateName) {
		// Same generation as the status describes: resume.
		e.appliedHash = hash
		if st.Reservation != nil {
			st.Reservation = nil // reservations die with the controller
			c.markDirty(e, true)
		}
		if v1alpha1.IsTerminal(st.Phase) {
			c.enqueueFinished(e)
			return
		}
		c.resume(e)
		return
	}
	// The spec changed while no controller ran. Had one run, an edit of a
	// task in flight would have waited for its generation to end Done and
	// started over; so only a generation that ended Failed or Rejected
	// hands its committed progress on, as an edit would have.
	if st.Phase != v1alpha1.PhaseFailed && st.Phase != v1alpha1.PhaseRejected {
		st.Progress.InputsHash = ""
	}
	c.nextGeneration(e, "")
}

// edit handles a change of a known manifest. spec.paused is not part of
// the spec hash: it applies at once, whatever the phase.
func (c *Controller) edit(e *entry, t *v1alpha1.Task, parseErr error) {
	hash := v1alpha1.SpecHash(t.Spec)
	old := e.task
	e.task, e.fileHash, e.parseErr = t, hash, parseErr
	if !sameStatus(&t.Status, &e.status) {
		// The new version dropped or changed the status block (a writer
		// that replaced the whole file): the controller's is put back, so
		// that a restart finds what this controller knows.
		c.markDirty(e, true)
	}
	if e.inQueue && parseErr == nil && old.Spec.Paused != t.Spec.Paused {
		if !t.Spec.Paused {
			c.freshForQueue()
		}
		_ = c.queue.SetPaused(e.name, t.Spec.Paused)
		c.log.Info().Str("task", e.name).Bool("paused", t.Spec.Paused).Msg("pause changed")
	}
	if hash == e.appliedHash && parseErr == nil {
		c.clearSpecPending(e)
		return
	}
	c.applyEdit(e)
}

// applyEdit makes the file's spec the next generation when the queue lets
// it (the task holds no worker), else reports it pending under
// SpecApplied=False; the end of the current generation calls it again.
func (c *Controller) applyEdit(e *entry) {
	if e.inQueue && c.queue.Holds(e.name) {
		msg := "the spec was edited while the task runs; only spec.paused applies now, the rest becomes the next generation once this one ends"
		if e.parseErr != nil {
			msg = "the edited spec is invalid and is not applied: " + e.parseErr.Error()
		}
		c.specPending(e, msg)
		return
	}
	// No worker holds the task: the last events of its generation were
	// pushed before Holds answered. Apply them first (which may apply this
	// very edit), so the generation's end is recorded before the next one.
	c.applyInbox()
	if !e.editPending() || c.entries[e.path] != e {
		return
	}
	if e.parseErr != nil {
		c.reject(e, e.fileHash, e.status.ObservedGeneration+1, e.parseErr)
		return
	}
	if !c.nextGeneration(e, "") {
		c.specPending(e, "the spec was edited while the task runs; only spec.paused applies now, the rest becomes the next generation once this one ends")
	}
}

// specPending records that the file holds a spec the task cannot take yet.
func (c *Controller) specPending(e *entry, msg string) {
	c.setCondition(e, v1alpha1.ConditionSpecApplied, metav1.ConditionFalse, v1alpha1.ReasonSpecChangePending, msg)
	c.markDirty(e, true)
}

// nextGeneration starts the spec in e.task as generation
// observedGeneration+1, whole or not at all: the batch adapter learns the
// new command and items under the new generation only, the queue takes the
// task in one Replace, and only then does the status change. It returns
// false, changing nothing, when the queue still runs the current
// generation. cause, when set, says why a task whose spec did not change
// runs again (a dependency ran again).
//
// Committed progress carries over only when the previous generation did
// not end Done and its items and working directory are unchanged
// (Progress.InputsHash); the queue applies that rule to its own account,
// which may be ahead of the events applied here.
func (c *Controller) nextGeneration(e *entry, cause string) bool {
	t, st := e.task, &e.status
	gen := st.ObservedGeneration + 1
	items, err := c.resolveItems(e, t.Spec)
	if err != nil {
		if e.inQueue && c.queue.Holds(e.name) {
			return false
		}
		c.reject(e, e.fileHash, gen, fmt.Errorf("spec.items: %w", err))
		return true
	}
	total := int64(len(items))
	inputs := v1alpha1.InputsHash(t.Spec)
	carry := st.Progress.InputsHash == inputs && st.Progress.ItemsTotal == total
	seq := st.QueueSeq
	if seq == 0 {
		seq = c.host.nextSeq()
	}
	ri := runInfoFor(t, e.owner, c.cfg.SpoolDir, c.cfg.StateDir, items)
	qt := c.queueTask(e, seq, gen, total)
	qt.InputBytesPerItem = ri.inputPerItem
	qt.ItemsDone, qt.BatchesDone = 0, 0
	if carry && st.Phase != v1alpha1.PhaseDone {
		qt.ItemsDone, qt.BatchesDone = st.Progress.ItemsDone, st.Progress.BatchesDone
	}
	// The queue's account, when it has one, wins over this status.
	qt.CarryProgress = carry && e.inQueue
	c.batches.set(e.name, gen, ri)
	c.batches.noteCommitted(e.name, gen, qt.ItemsDone) // carried from the status
	c.freshForQueue()
	rep, err := c.queue.Replace(qt)
	if err != nil {
		c.batches.drop(e.name, gen)
		if errors.Is(err, queue.ErrSpecPending) {
			return false
		}
		c.log.Warn().Str("task", e.name).Err(err).Msg("the queue did not take the task")
		return true
	}
	c.batches.keepOnly(e.name, gen)
	prevPhase := st.Phase
	if rep.Existed {
		prevPhase = rep.Phase
	}
	kept := rep.ItemsDone > 0
	st.ObservedGeneration, st.SpecHash, st.QueueSeq, st.LogFile = gen, e.fileHash, seq, ri.logPath
	st.Progress = v1alpha1.Progress{ItemsTotal: total, ItemsDone: rep.ItemsDone, BatchesDone: rep.BatchesDone, InputsHash: inputs}
	if !kept {
		st.LastBatch, st.StartTime = nil, nil
	}
	st.CompletionTime, st.Reservation, st.ProcessGroup = nil, nil, nil
	st.Conditions = nil
	e.appliedHash, e.inQueue = e.fileHash, true
	if cause != "" {
		c.setCondition(e, v1alpha1.ConditionRerun, metav1.ConditionTrue, v1alpha1.ReasonDependencyRerun, cause)
	}
	fresh := prevPhase == "" && e.lastWrite.IsZero() && cause == ""
	c.setPhase(e, v1alpha1.PhasePending, "Queued", fmt.Sprintf("queued as generation %d", gen))
	c.markDirty(e, true)
	if fresh {
		// Only queued: written with its first phase change, or once
		// QueuedWriteDelay has passed.
		e.urgentAt, e.queuedUntil = time.Time{}, time.Now().Add(c.cfg.QueuedWriteDelay)
	}
	if prevPhase == v1alpha1.PhaseDone {
		c.rerunDependents(e)
	}
	return true
}

// rerunDependents starts a new generation of every Done task that depends
// on e, which runs again: a pipeline never mixes the outputs of two
// generations (as make would rebuild what depends on a changed rule). The
// dependents wait for e as any dependent does.
func (c *Controller) rerunDependents(e *entry) {
	cause := fmt.Sprintf("dependency %s runs again as generation %d; re-running on its new outputs", e.name, e.status.ObservedGeneration)
	for _, d := range c.dependentsOf(e.name) {
		if d.status.Phase == v1alpha1.PhaseDone && d.parseErr == nil && d.duplicateOf == "" {
			c.log.Info().Str("task", d.name).Str("dependency", e.name).Msg("re-running after its dependency")
			c.nextGeneration(d, cause)
		}
	}
}

// dependentsOf lists the tasks naming name in dependsOn, in name order.
func (c *Controller) dependentsOf(name string) []*entry {
	var out []*entry
	for _, d := range c.entries {
		if d.task != nil && slices.Contains(d.task.Spec.DependsOn, name) {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// queueTask is what the queue holds of e's spec at generation gen.
func (c *Controller) queueTask(e *entry, seq, gen, total int64) queue.Task {
	t, st := e.task, &e.status
	qt := queue.Task{
		Name:        e.name,
		Seq:         seq,
		Generation:  gen,
		Estimate:    EstimateFor(&t.Spec, max(total, 1)),
		ItemsTotal:  total,
		ItemsDone:   st.Progress.ItemsDone,
		BatchesDone: st.Progress.BatchesDone,
		DependsOn:   t.Spec.DependsOn,
		Paused:      t.Spec.Paused,
		Retries:     int(t.Spec.Retries),
		Mode:        t.Spec.Resources.EffectiveEstimate(),
		Profile:     ProfileOf(&t.Spec),
	}
	if t.Spec.BatchTimeout != nil {
		qt.BatchTimeout = t.Spec.BatchTimeout.Duration
	}
	return qt
}

// resume hands the queue an unfinished task a previous controller left, at
// the generation its status describes, from its committed progress. A task
// resumed unchanged is not rewritten.
func (c *Controller) resume(e *entry) {
	t, st := e.task, &e.status
	items, err := c.resolveItems(e, t.Spec)
	if err != nil {
		c.reject(e, e.appliedHash, st.ObservedGeneration, fmt.Errorf("spec.items: %w", err))
		return
	}
	total := int64(len(items))
	before := st.Progress
	inputs := v1alpha1.InputsHash(t.Spec)
	if st.Progress.ItemsTotal != total || st.Progress.ItemsDone > total || (st.Progress.InputsHash != "" && st.Progress.InputsHash != inputs) {
		if st.Progress.ItemsTotal != 0 {
			c.log.Warn().Str("task", e.name).Int64("was", st.Progress.ItemsTotal).Int64("now", total).Msg("the items changed since the last run; starting over")
		}
		st.Progress = v1alpha1.Progress{ItemsTotal: total}
	}
	st.Progress.InputsHash = inputs
	stale := false
	if lb := st.LastBatch; lb != nil && lb.EndTime == nil && lb.ItemsReported != nil {
		// What a batch of a dead controller reported: that batch is gone.
		lb.ItemsReported, stale = nil, true
	}
	if st.QueueSeq == 0 {
		st.QueueSeq = c.host.nextSeq()
	}
	ri := runInfoFor(t, e.owner, c.cfg.SpoolDir, c.cfg.StateDir, items)
	c.batches.set(e.name, st.ObservedGeneration, ri)
	c.batches.noteCommitted(e.name, st.ObservedGeneration, st.Progress.ItemsDone)
	qt := c.queueTask(e, st.QueueSeq, st.ObservedGeneration, total)
	qt.InputBytesPerItem = ri.inputPerItem
	c.freshForQueue()
	if _, err := c.queue.Replace(qt); err != nil {
		c.batches.drop(e.name, st.ObservedGeneration)
		c.log.Warn().Str("task", e.name).Err(err).Msg("the queue did not take the task")
		return
	}
	e.inQueue = true
	if st.LogFile != ri.logPath || st.Progress != before || stale {
		st.LogFile = ri.logPath
		c.markDirty(e, true)
	}
	if st.Phase != v1alpha1.PhasePending {
		c.setPhase(e, v1alpha1.PhasePending, "Resumed", fmt.Sprintf("resumed at generation %d from %d committed items", st.ObservedGeneration, st.Progress.ItemsDone))
	}
}

// freshForQueue waits (at most freshWait) for a snapshot of the machine
// when the prober is at its idle pace, before the owner hands the queue a
// task it may admit at once: the first admission after an idle spell
// decides on a snapshot taken after the task came, as the others do on
// one about a ProbeInterval old at most. REQUIRES: owner goroutine.
func (c *Controller) freshForQueue() {
	if c.host.prober.stale() {
		c.host.prober.WaitFresh(context.Background())
	}
}

// enqueueFinished hands the queue a task a previous controller finished, so
// that its dependents can be resolved. Nothing of its status changes and its
// items are not resolved again: its inputs may be gone, and a restart on a
// spool of finished manifests must not rewrite them. A Done task one of
// whose dependencies is known and not Done (it was re-run, and the re-run
// of this one was not written before a crash) runs again.
func (c *Controller) enqueueFinished(e *entry) {
	st := &e.status
	qt := c.queueTask(e, st.QueueSeq, st.ObservedGeneration, st.Progress.ItemsTotal)
	qt.Terminal = st.Phase
	c.keepReofferable(e, &qt)
	if _, err := c.queue.Replace(qt); err != nil {
		c.log.Warn().Str("task", e.name).Err(err).Msg("the queue did not take the task")
		return
	}
	e.inQueue = true
	if st.Phase == v1alpha1.PhaseDone {
		for _, dep := range e.task.Spec.DependsOn {
			if d := c.entryByName(dep); d != nil && d.duplicateOf == "" && d.status.Phase != v1alpha1.PhaseDone {
				c.nextGeneration(e, fmt.Sprintf("dependency %s is %s at generation %d; re-running after it", dep, d.status.Phase, d.status.ObservedGeneration))
				return
			}
		}
	}
	// Dependents seen before this task and left Done on an older
	// generation of it are handled by their own enqueueFinished, or here
	// when this task is not Done.
	if st.Phase != v1alpha1.PhaseDone {
		for _, d := range c.dependentsOf(e.name) {
			if d.status.Phase == v1alpha1.PhaseDone && d.parseErr == nil && d.duplicateOf == "" {
				c.nextGeneration(d, fmt.Sprintf("dependency %s is %s at generation %d; re-running after it", e.name, st.Phase, st.ObservedGeneration))
			}
		}
	}
}

// reject marks e Rejected for an invalid spec and takes it out of the queue.
// A Done task rejected by an edit no longer stands for its outputs: its
// Done dependents run again (and wait on it).
func (c *Controller) reject(e *entry, hash string, gen int64, err error) {
	if e.inQueue {
		_ = c.queue.Remove(e.name)
		e.inQueue = false
	}
	c.batches.forget(e.name)
	wasDone := e.status.Phase == v1alpha1.PhaseDone
	e.appliedHash = hash
	st := &e.status
	if st.ObservedGeneration != gen {
		st.Conditions = nil // those of the generation this one replaces
	}
	st.SpecHash, st.ObservedGeneration = hash, gen
	st.Reservation = nil
	c.setCondition(e, v1alpha1.ConditionValid, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, err.Error())
	c.leaveActivePhase(e, v1alpha1.ReasonInvalidSpec, err.Error())
	c.setPhase(e, v1alpha1.PhaseRejected, v1alpha1.ReasonInvalidSpec, err.Error())
	if wasDone {
		c.rerunDependents(e)
	}
}

// rejectDuplicate rejects a second manifest that uses a name already taken.
func (c *Controller) rejectDuplicate(ev spool.Event, owner string) {
	e := c.entries[ev.Path]
	if e == nil {
		e = &entry{path: ev.Path, name: ev.Task.Metadata.Name, status: ev.Task.Status}
		c.putEntry(ev.Path, e)
	}
	e.task, e.duplicateOf = ev.Task, owner
	msg := fmt.Sprintf("metadata.name %q is already used by %s", e.name, filepath.Base(owner))
	e.status.SpecHash = v1alpha1.SpecHash(ev.Task.Spec)
	c.setCondition(e, v1alpha1.ConditionValid, metav1.ConditionFalse, v1alpha1.ReasonDuplicateName, msg)
	c.leaveActivePhase(e, v1alpha1.ReasonDuplicateName, msg)
	c.setPhase(e, v1alpha1.PhaseRejected, v1alpha1.ReasonDuplicateName, msg)
}

// leaveActivePhase moves e to Pending when its phase is one no worker of
// this controller stands behind (Reserved, Running or Paused, read from a
// file a crashed controller left or copied from another task's) and cannot
// go to Rejected directly (the phase table).
func (c *Controller) leaveActivePhase(e *entry, reason, message string) {
	if !v1alpha1.AllowedTransition(e.status.Phase, v1alpha1.PhaseRejected) {
		c.setPhase(e, v1alpha1.PhasePending, reason, message)
	}
}

// deleteEntry forgets the manifest at path, cancelling its task.
func (c *Controller) deleteEntry(path, why string) {
	e := c.entries[path]
	if e == nil {
		return
	}
	c.dropEntry(path)
	delete(c.dirty, path)
	if e.duplicateOf != "" {
		return
	}
	delete(c.byName, e.name)
	if e.inQueue {
		c.queue.Remove(e.name)
	}
	c.batches.forget(e.name)
	c.log.Info().Str("task", e.name).Str("reason", why).Msg("task cancelled")
	// A duplicate waiting for this name can now take it.
	for _, d := range c.entries {
		if d.duplicateOf == path && d.name == e.name {
			c.dropEntry(d.path)
			c.handleFile(spool.Event{Type: spool.Modified, Path: d.path, Name: d.name, Task: d.task})
			break
		}
	}
}

// applyInbox applies every note pushed so far, oldest first.
// REQUIRES: owner goroutine.
func (c *Controller) applyInbox() {
	for {
		x, ok := c.inbox.pop()
		if !ok {
			if len(c.pendingHistory) >= historyBatchMax || time.Since(c.historyAt) >= historyInterval {
				c.flushHistory()
			}
			return
		}
		c.handleNote(x)
	}
}

// historyInterval and historyBatchMax bound how long and how many
// measured batches wait in memory for their append to the store: one
// transaction (and its fsync) per interval, not per batch. The book has
// them at once; a kill -9 loses at most the interval's records from the
// store, never what the book learned in this run.
const (
	historyInterval = 250 * time.Millisecond
	historyBatchMax = 256
)

// flushHistory appends the records gathered so far to the store, in one
// transaction. A failed append is logged and the records dropped: the
// book has them for this run. REQUIRES: owner goroutine.
func (c *Controller) flushHistory() {
	c.historyAt = time.Now()
	if len(c.pendingHistory) == 0 {
		return
	}
	c.estimatesDirty = true
	if c.host.store != nil {
		if err := c.host.store.Append(c.pendingHistory...); err != nil {
			c.log.Warn().Err(err).Int("records", len(c.pendingHistory)).Msg("history not persisted")
		}
	}
	clear(c.pendingHistory)
	c.pendingHistory = c.pendingHistory[:0]
}

// publishEstimates publishes every profile's model for the estimates verb
// when it changed. REQUIRES: owner goroutine.
func (c *Controller) publishEstimates() {
	learned := c.host.learned.Load()
	if !c.estimatesDirty && learned == c.estimatesLearned {
		return
	}
	if err := publishEstimates(c.cfg.StateDir, Estimates(c.host.book)); err != nil {
		c.log.Debug().Err(err).Msg("estimates not published")
		return
	}
	c.estimatesDirty, c.estimatesLearned = false, learned
}

// handleNote applies a note from the inbox. REQUIRES: owner goroutine.
func (c *Controller) handleNote(x any) {
	switch n := x.(type) {
	case queue.Event:
		c.applyQueueEvent(n)
	case history.Entry:
		c.pendingHistory = append(c.pendingHistory, n)
	case groupNote:
		if e := c.entryByName(n.task); e != nil {
			e.status.ProcessGroup = &v1alpha1.ProcessGroupRef{PGID: n.group.PGID, StartTicks: n.group.StartTicks}
			if n.group.Cgroup != nil {
				e.status.ProcessGroup.Cgroup = n.group.Cgroup.Main()
			}
			c.markDirty(e, false)
		}
	case progressNote:
		e := c.entryByName(n.task)
		if e == nil || !e.inQueue || n.generation != e.status.ObservedGeneration {
			return
		}
		// Only the batch the status shows as running; a note that
		// arrives after its batch ended is stale.
		if lb := e.status.LastBatch; lb != nil && lb.Index == n.index && lb.EndTime == nil {
			items := n.items
			lb.ItemsReported = &items
			c.markDirty(e, false)
		}
	}
}

func (c *Controller) entryByName(name string) *entry {
	path, ok := c.byName[name]
	if !ok {
		return nil
	}
	return c.entries[path]
}

// applyQueueEvent writes a queue event into the task's status.
func (c *Controller) applyQueueEvent(ev queue.Event) {
	e := c.entryByName(ev.Task)
	if e == nil || !e.inQueue || ev.Generation != e.status.ObservedGeneration {
		return // a generation this controller no longer applies
	}
	st := &e.status
	now := metav1.NewTime(ev.Time)
	switch ev.Type {
	case queue.EventPhase:
		switch ev.Phase {
		case v1alpha1.PhaseReserved, v1alpha1.PhaseRunning, v1alpha1.PhasePaused:
			if ev.Contract != nil {
				st.Reservation = ContractStatus(*ev.Contract)
			}
			meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionDependenciesReady)
			c.setCondition(e, v1alpha1.ConditionAdmitted, metav1.ConditionTrue, v1alpha1.ReasonAdmitted, admittedMessage(ev))
			if ev.Phase == v1alpha1.PhaseRunning && st.StartTime == nil {
				st.StartTime = &now
			}
		case v1alpha1.PhasePending:
			st.Reservation = nil
			reoffered(st)
		case v1alpha1.PhaseDone:
			st.Reservation, st.ProcessGroup = nil, nil
			st.CompletionTime = &now
			c.setCondition(e, v1alpha1.ConditionComplete, metav1.ConditionTrue, v1alpha1.ReasonCompleted, ev.Message)
		case v1alpha1.PhaseFailed, v1alpha1.PhaseRejected:
			st.Reservation, st.ProcessGroup = nil, nil
			st.CompletionTime = &now
			c.setCondition(e, v1alpha1.ConditionComplete, metav1.ConditionFalse, ev.Reason, ev.Message)
		}
		st.Progress.ItemsDone, st.Progress.BatchesDone = ev.ItemsDone, ev.BatchesDone
		c.setPhase(e, ev.Phase, ev.Reason, ev.Message)
		if v1alpha1.IsTerminal(ev.Phase) && e.editPending() {
			// An edit waited for this generation to end, Done included:
			// it is the next generation now.
			c.applyEdit(e)
		}
	case queue.EventWaiting:
		typ := v1alpha1.ConditionAdmitted
		switch ev.Reason {
		case v1alpha1.ReasonWaitingForDependencies, v1alpha1.ReasonDependencyFailed, v1alpha1.ReasonDependencyMissing:
			typ = v1alpha1.ConditionDependenciesReady
		}
		if typ == v1alpha1.ConditionAdmitted {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionDependenciesReady, Status: metav1.ConditionTrue, Reason: "AllDone", Message: "every dependency is Done", ObservedGeneration: st.ObservedGeneration})
		}
		prev := meta.FindStatusCondition(st.Conditions, typ)
		sameReason := prev != nil && prev.Status == metav1.ConditionFalse && prev.Reason == ev.Reason
		changed := setStatusCondition(e, typ, metav1.ConditionFalse, ev.Reason, ev.Message)
		if changed && !sameReason {
			c.log.Info().Str("task", e.name).Str("reason", ev.Reason).Msg("waiting: " + ev.Message)
		}
		switch {
		case st.Phase != v1alpha1.PhasePending:
			c.setPhase(e, v1alpha1.PhasePending, ev.Reason, ev.Message)
		case changed && sameReason:
			// Only the numbers moved (the load, the free memory): kept
			// in memory at once, written at most every
			// waitNumbersInterval, so that a machine-wide gate over
			// thousands of waiting tasks is not thousands of writes and
			// log lines per probe.
			if now := time.Now(); now.Sub(e.waitNumbersAt) >= waitNumbersInterval {
				e.waitNumbersAt = now
				c.markDirty(e, false)
			}
		case changed:
			// The first reason a task waits is worth a write at once,
			// but for the reasons every queued task passes through.
			c.markDirty(e, e.lastWrite.IsZero() && !(!e.queuedUntil.IsZero() && passingWait(ev.Reason)))
		}
	case queue.EventBatchStarted:
		b := ev.Batch
		st.LastBatch = &v1alpha1.BatchRecord{Index: b.Index, Start: b.Start, Size: b.Size, Threads: int32(b.Contract.Threads), StartTime: &now, Attempt: int32(b.Attempt)}
		st.Reservation = ContractStatus(b.Contract)
		c.markDirty(e, false)
	case queue.EventBatchEnded:
		b, r := ev.Batch, ev.Result
		lb := &v1alpha1.BatchRecord{Index: b.Index, Start: b.Start, Size: b.Size, Threads: int32(b.Contract.Threads), Attempt: int32(b.Attempt), Reason: r.Reason}
		started, ended := metav1.NewTime(r.Started), metav1.NewTime(r.Ended)
		lb.StartTime, lb.EndTime = &started, &ended
		if r.ExitCode >= 0 {
			code := int32(r.ExitCode)
			lb.ExitCode = &code
		}
		if r.PeakMemoryBytes > 0 {
			lb.PeakMemory = resource.NewQuantity(r.PeakMemoryBytes, resource.BinarySI)
		}
		if r.PeakWorkingSetBytes > 0 {
			lb.WorkingSet = resource.NewQuantity(r.PeakWorkingSetBytes, resource.BinarySI)
		}
		st.LastBatch = lb
		st.ProcessGroup = nil
		if r.Reason == v1alpha1.ReasonMemoryExceeded && e.task.Spec.Resources.EffectiveEstimate() != v1alpha1.EstimateStrict {
			c.setCondition(e, v1alpha1.ConditionEstimateLow, metav1.ConditionTrue, v1alpha1.ReasonMemoryExceeded, c.estimateLowMessage(e, b, r))
		} else if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionEstimateLow); cond != nil && r.ExitCode == 0 && r.Reason == "" {
			// A batch succeeded since: the suggestion is the model's now.
			base, _, _ := strings.Cut(cond.Message, suggestionSep)
			c.setCondition(e, v1alpha1.ConditionEstimateLow, metav1.ConditionTrue, cond.Reason, base+c.suggestion(e, b.Size, 0))
		}
		st.Progress.ItemsDone, st.Progress.BatchesDone = ev.ItemsDone, ev.BatchesDone
		c.metrics.ObserveBatch(string(e.task.Spec.Class), r.Ended.Sub(r.Started), r.PeakMemoryBytes)
		// The end of a batch is a commit point: written at this flush, with
		// no grace, so that a crash re-runs at most the batch in flight. The
		// events already queued (a Done that follows) land in the same write.
		c.markDirty(e, true)
		e.commit = true
	}
}

func admittedMessage(ev queue.Event) string {
	if ev.Contract == nil {
		return ev.Message
	}
	return queue.ContractMessage(*ev.Contract)
}

// setPhase moves e to phase, logging the transition and scheduling a write.
// It is the only place a status phase changes, and it refuses what
// v1alpha1.AllowedTransition forbids: that is a bug, logged as an error and
// counted (lardon3d_phase_transitions_refused_total).
func (c *Controller) setPhase(e *entry, phase v1alpha1.Phase, reason, message string) {
	if e.status.Phase == phase {
		c.markDirty(e, false)
		return
	}
	from := e.status.Phase
	if !v1alpha1.AllowedTransition(from, phase) {
		c.refused++
		c.metrics.ObservePhaseRefused(from, phase)
		c.log.Error().Str("task", e.name).Str("from", string(from)).Str("phase", string(phase)).Str("reason", reason).Msg("BUG: forbidden phase transition refused: " + message)
		return
	}
	e.status.Phase = phase
	c.phasesStale = true
	c.log.Info().Str("task", e.name).Str("from", string(from)).Str("phase", string(phase)).Str("reason", reason).Msg(message)
	c.markDirty(e, true)
}

// setCondition sets a condition and schedules a write when anything
// changed; it reports whether anything did.
func (c *Controller) setCondition(e *entry, typ string, status metav1.ConditionStatus, reason, message string) bool {
	changed := setStatusCondition(e, typ, status, reason, message)
	if changed {
		c.markDirty(e, false)
	}
	return changed
}

// setStatusCondition sets a condition in memory only; it reports whether
// anything changed.
func setStatusCondition(e *entry, typ string, status metav1.ConditionStatus, reason, message string) bool {
	if reason == "" {
		reason = "Unknown"
	}
	return meta.SetStatusCondition(&e.status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message,
		ObservedGeneration: e.status.ObservedGeneration,
	})
}

func (c *Controller) clearSpecPending(e *entry) {
	if meta.RemoveStatusCondition(&e.status.Conditions, v1alpha1.ConditionSpecApplied) {
		c.markDirty(e, true)
	}
}

// passingWait reports whether reason is one every queued task may pass
// through, not worth writing a fresh task's status for before
// QueuedWriteDelay: waiting for a worker of its own (the queue's normal
// state) or for the first snapshot of the machine (the controller's
// first second).
func passingWait(reason string) bool {
	return reason == queue.ReasonMaxParallel || reason == string(governor.ReasonNoSnapshot)
}

// markDirty schedules a status write: urgent ones (phase changes, batch
// commits) within PhaseWriteDelay, the rest within ProgressInterval.
func (c *Controller) markDirty(e *entry, urgent bool) {
	if c.entries[e.path] != e {
		return
	}
	c.dirty[e.path] = struct{}{}
	c.marked = append(c.marked, e)
	if urgent && e.urgentAt.IsZero() {
		e.urgentAt = time.Now()
	}
}

// dueAt is when e's dirty status is due for a write at now.
func (c *Controller) dueAt(e *entry, now time.Time) time.Time {
	at := e.lastWrite.Add(c.cfg.ProgressInterval)
	if !e.urgentAt.IsZero() {
		at = e.urgentAt.Add(c.cfg.PhaseWriteDelay)
	} else if e.queuedUntil.After(at) {
		at = e.queuedUntil
	}
	if e.commit {
		at = now
	}
	if e.retryAt.After(at) {
		at = e.retryAt
	}
	return at
}

// flush writes the statuses that are due and returns when the next one is
// (0 when none is waiting). With all set, it writes every dirty status
// once, failed ones included. The writes due together are one group
// commit when the spool can make one (groupWriter).
func (c *Controller) flush(now time.Time, all bool) time.Duration {
	for _, e := range c.marked {
		c.schedule(e, c.dueAt(e, now))
	}
	c.marked = c.marked[:0]
	var due []*entry
	if all {
		for path := range c.dirty {
			if e := c.entries[path]; e != nil {
				due = append(due, e)
			} else {
				delete(c.dirty, path)
			}
		}
	} else {
		due = c.popDue(now)
		// limitDue sorts due in place: what it leaves is due[flushMax:],
		// still due, written by the next pass.
		var left int
		if due, left = limitDue(due, flushMax); left > 0 {
			for _, e := range due[len(due) : len(due)+left] {
				c.schedule(e, now)
			}
		}
	}
	wrote := false
	for i, r := range c.writeAll(due) {
		e := due[i]
		if c.wrote(e, now, r.err, r.took) {
			delete(c.dirty, e.path)
			wrote = true
		} else if !all && c.isDirty(e) {
			c.schedule(e, c.dueAt(e, now)) // at its retry
		}
	}
	if wrote {
		c.countPhases(now, false)
	}
	if all {
		c.requeueDirty(now)
	}
	return c.nextDue(now)
}

// groupWriter is a Spool that writes several statuses as one group
// commit (*spool.Spool is one).
type groupWriter interface {
	WriteStatuses(ws []spool.StatusWrite) []error
}

// writeResult is how one status write ended and how long it took.
type writeResult struct {
	err  error
	took time.Duration
}

// writeAll writes the statuses of es: one group commit when the spool
// makes them, else one by one.
func (c *Controller) writeAll(es []*entry) []writeResult {
	res := make([]writeResult, len(es))
	if g, ok := c.spool.(groupWriter); ok && len(es) > 1 {
		ws := make([]spool.StatusWrite, len(es))
		for i, e := range es {
			ws[i] = spool.StatusWrite{Path: e.path, Status: &e.status}
		}
		start := time.Now()
		errs := g.WriteStatuses(ws)
		took := time.Since(start)
		for i := range es {
			res[i] = writeResult{err: errs[i], took: took}
		}
		return res
	}
	for i, e := range es {
		start := time.Now()
		err := c.spool.WriteStatus(e.path, &e.status)
		res[i] = writeResult{err: err, took: time.Since(start)}
	}
	return res
}

// Status write retries back off from writeRetryMin, doubling up to
// writeRetryMax, as controller-runtime requeues a failed reconcile.
const (
	writeRetryMin = 100 * time.Millisecond
	writeRetryMax = 10 * time.Second
)

// wrote settles the write of e's status that ended with err; on failure
// e stays due (a commit point too) and is retried with backoff. It reports
// whether the write landed.
func (c *Controller) wrote(e *entry, now time.Time, err error, took time.Duration) bool {
	if errors.Is(err, spool.ErrDeferred) {
		// A writer holds the file (or an editor is saving it): the spool
		// makes the write once it is free. Not a failure; the entry stays
		// due and is tried again soon, in case the spool cannot.
		c.log.Debug().Str("task", e.name).Str("file", e.path).Err(err).Msg("status write deferred")
		e.retryAt = now.Add(2 * writeRetryMin)
		return false
	}
	c.metrics.ObserveStatusWrite(took, err)
	if errors.Is(err, spool.ErrNotRewritable) && !c.closing && e.lastWrite.IsZero() && e.task.Status.Phase == "" {
		// A file whose layout the editor refuses (anchors, several
		// documents) can never hold a status: its progress could not be
		// committed, so it does not run. It is reported like a refused
		// file, and taken again once the user rewrites it. A file that
		// held a status already was broken by an edit (a save half-way,
		// a typo): that is a failed write, retried until the user fixes
		// it, and the task keeps running.
		c.log.Warn().Str("task", e.name).Str("file", e.path).Err(err).Msg("manifest ignored: its status cannot be written into it")
		c.invalid[e.path] = err
		c.deleteEntry(e.path, "status cannot be written into the manifest")
		return true
	}
	if err != nil {
		e.writeFailures++
		backoff := writeRetryMax
		if e.writeFailures < 8 {
			backoff = min(writeRetryMin<<(e.writeFailures-1), writeRetryMax)
		}
		e.retryAt = now.Add(backoff)
		if e.writeErr == nil || e.writeErr.Error() != err.Error() || e.writeFailures&(e.writeFailures-1) == 0 {
			c.log.Warn().Str("task", e.name).Str("file", e.path).Int("attempts", e.writeFailures).Dur("retryIn", backoff).Err(err).Msg("status not written; retrying")
		}
		if e.writeErr == nil {
			e.failingSince = now
		}
		c.writeErrorsChanged = true
		e.writeErr = err
		return false
	}
	if e.writeErr != nil {
		c.log.Info().Str("task", e.name).Str("file", e.path).Int("attempts", e.writeFailures+1).Msg("status written after failures")
		c.writeErrorsChanged = true
	}
	e.urgentAt, e.commit, e.queuedUntil = time.Time{}, false, time.Time{}
	e.lastWrite = now
	c.batches.noteCommitted(e.name, e.status.ObservedGeneration, e.status.Progress.ItemsDone)
	c.index.wrote(e.path, e.task, &e.status)
	e.writeErr, e.writeFailures, e.retryAt = nil, 0, time.Time{}
	return true
}

// phasesEvery bounds how often the phase gauge is recounted (a count is
// a pass over every task, and writes land thousands of times a second).
const phasesEvery = 250 * time.Millisecond

// putEntry makes e the entry of the manifest at path, and dropEntry
// forgets the entry at path: c.entries changes only through them, and a
// phase only in setPhase, so that countPhases knows when to count again.
// REQUIRES: owner goroutine.
func (c *Controller) putEntry(path string, e *entry) {
	c.entries[path] = e
	c.phasesStale = true
}

// dropEntry: see putEntry.
func (c *Controller) dropEntry(path string) {
	delete(c.entries, path)
	c.phasesStale = true
}

// countPhases recounts the tasks per phase for the gauge, when a phase
// changed or an entry came or went since the last count, at most every
// phasesEvery; always when force. (Walking ten thousand entries every 2 s
// took a tenth of an idle controller's CPU.)
func (c *Controller) countPhases(now time.Time, force bool) {
	if !force && (!c.phasesStale || now.Sub(c.phasesAt) < phasesEvery) {
		return
	}
	c.phasesAt, c.phasesStale = now, false
	counts := make(map[v1alpha1.Phase]int)
	for _, e := range c.entries {
		counts[e.status.Phase]++
	}
	c.metrics.SetPhases(counts)
}

type noMetrics struct{}

func (noMetrics) ObserveDecision(governor.Decision)         {}
func (noMetrics) ObserveBatch(string, time.Duration, int64) {}
func (noMetrics) ObserveStatusWrite(time.Duration, error)   {}
func (noMetrics) ObservePhaseRefused(_, _ v1alpha1.Phase)   {}
func (noMetrics) SetPhases(map[v1alpha1.Phase]int)          {}
func (noMetrics) SetReady(bool)                             {}

// estimateLowMessage says by how much a killed batch's reservation was
// low, and what to declare instead. REQUIRES: owner goroutine.
func (c *Controller) estimateLowMessage(e *entry, b *queue.Batch, r *queue.BatchResult) string {
	had := b.Contract.MemoryBytes
	used := max(r.PeakMemoryBytes, had)
	what := "the declared costs"
	if e.task.Spec.Resources.EffectiveEstimate() == v1alpha1.EstimateLearned {
		what = "the learned estimate"
	}
	msg := fmt.Sprintf("batch %d of %d items at %d threads was killed for memory: %s reserved %s and it needed more than %s",
		b.Index, b.Size, b.Contract.Threads, what, governor.FormatBytes(had), governor.FormatBytes(used))
	if had > 0 && used > had {
		msg += fmt.Sprintf(" (%d%% more)", (used-had)*100/had)
	}
	msg += "; retried under the measured need"
	return msg + c.suggestion(e, b.Size, used)
}

// suggestionSep starts the suggestion of an EstimateTooLow message.
const suggestionSep = "; suggested: "

// suggestion is what to declare: the profile's learned block when it has
// one, else the bumped need of a batch killed at used bytes.
func (c *Controller) suggestion(e *entry, size, used int64) string {
	if s := Suggest(c.host.book, ProfileOf(&e.task.Spec)); s.OK {
		note := fmt.Sprintf("from %d batches", s.Model.Samples)
		if s.Note != "" {
			note += "; " + s.Note
		}
		return fmt.Sprintf("%s%s (%s)", suggestionSep, ResourcesBlock(s.Costs), note)
	}
	if used <= 0 {
		return ""
	}
	return fmt.Sprintf("%sat least %s for a batch of %d", suggestionSep, governor.FormatBytes(history.Params{}.Bump(used)), size)
}
