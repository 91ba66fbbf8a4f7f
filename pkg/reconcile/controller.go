package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// Spool is what the controller needs of the spool directory; *spool.Spool
// is one.
type Spool interface {
	// Run watches the directory until ctx ends; Events carries what it
	// sees, its first listing followed by one Synced event (the queue
	// dispatches nothing before every spool's).
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
	// GPUMemory, optional, measures each process's GPU memory (the
	// probe): a batch that reserved GPU memory is held to it
	// (runner.Spec.GPUMemory). Nil holds no batch to its GPU memory.
	GPUMemory runner.GPUMemoryReader
	// MemoryDomain, optional, names the cgroup whose memory limit bounds
	// the controller (probe.Prober.MemoryDomain; "" or nil: the machine):
	// an eviction names the largest programs in it.
	MemoryDomain func() string
	// Executor, optional, runs the batches; nil runs them as processes
	// of this machine (runner.Processes). The node agent's runs each as
	// a Pod (podrunner.Pods).
	Executor runner.Executor
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
	// writer writes the statuses (statuswriter.go), started by loop;
	// resolver resolves items (items.go).
	writer   *statusWriter
	resolver *resolver

	// Owned by the loop goroutine.
	// pendingHistory are records waiting for the store; estimatesDirty
	// says the published estimates are stale.
	pendingHistory []history.Entry
	estimatesDirty bool
	// estimatesLearned is the host's learned count the published
	// estimates include.
	estimatesLearned int64
	// historyAt is when the pending records were last appended.
	historyAt time.Time
	// tasks are the manifests the spool holds.
	tasks taskTable
	// marked are the entries whose status changed since the last hand-off
	// to the writer (handWrites); writeSeq numbers the versions handed.
	marked   []*entry
	writeSeq uint64
	// statusWritten: a write landed since the phases were last counted.
	statusWritten bool
	synced        bool
	// index is what get lists (index.go).
	index listIndex
	// closing is set once Run shuts down: no task is cancelled any more.
	closing bool
	// runAs runs the spool's tasks (spoolUser), set by prepare.
	runAs *runner.User
	// account is who the spool's tasks are charged to (spoolAccount),
	// set by prepare.
	account string
	// started is set once the host started the loop (Host.spoolsMu).
	started bool
	// leave is its part in Host.Leave (leave.go).
	leave leaveState
	// stopSpool ends the spool's watcher; spoolErr is its result.
	stopSpool func()
	spoolErr  chan error
	// phasesAt is when the phase gauge was last recounted.
	phasesAt time.Time
}

// New builds the controller of a process that serves one spool; Run
// starts it. A process that serves several builds a Host and Adds them.
func New(cfg Config, deps Deps) *Controller {
	return NewHost(cfg, deps).Add(cfg, deps.Spool)
}

// Drain, on, starts no batch on this machine any more and lets those in
// flight end (Host.Drain); Drain(false) dispatches again. Safe from any
// goroutine.
func (c *Controller) Drain(on bool) { c.host.Drain(on) }

// Holds reports whether a worker holds the task name (Reserved, Running,
// Paused, or between two batches): false once a drained task left its
// batch boundary. Safe from any goroutine.
func (c *Controller) Holds(name string) bool { return c.queue.Holds(name) }

type observerFunc func(queue.Event)

func (f observerFunc) Observe(e queue.Event) { f(e) }

// Outcome summarises how Run ended.
type Outcome struct {
	// AllDone is true when every task ended Done and no manifest was
	// invalid or refused.
	AllDone bool
	// Refused counts the manifests the spools ignored with a reason
	// (spool.Spool.Refused: root-owned, another user's, a link out of the
	// spool): none of them ran.
	Refused int
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
	if err := makeStateDir(c.cfg.StateDir); err != nil {
		return err
	}
	runAs, err := spoolUser(c.cfg.SpoolDir)
	if err != nil {
		return err
	}
	if want := c.cfg.SpoolOwner; want != nil && os.Geteuid() == 0 && (runAs == nil && *want != 0 || runAs != nil && runAs.UID != *want) {
		return fmt.Errorf("spool %s: its directory changed owner since it was checked (want uid %d)", c.cfg.SpoolDir, *want)
	}
	c.runAs = runAs
	c.account = c.cfg.Account
	if c.account == "" {
		c.account = spoolAccount(c.cfg.SpoolDir)
	}
	killLeftovers(c.cfg.StateDir, c.batches.cgroups, sweep, c.log)
	c.batches.journal = newGroupJournal(filepath.Join(c.cfg.StateDir, "run"))
	c.estimatesDirty = true
	return nil
}

// loop is the owner goroutine while the host runs: it watches the spool
// and applies its events and the inbox's notes until ctx ends, or the
// spool stops (its error); the status writer runs beside it. With
// ExitWhenDone it tells the host whether the spool is settled after each
// pass.
func (c *Controller) loop(ctx context.Context) error {
	spoolCtx, stopSpool := context.WithCancel(context.Background())
	c.stopSpool = stopSpool
	c.spoolErr = make(chan error, 1)
	go func() { c.spoolErr <- c.spool.Run(spoolCtx) }()
	c.writer = newStatusWriter(c.spool, writeTiming{progress: c.cfg.ProgressInterval, phaseDelay: c.cfg.PhaseWriteDelay}, c.metrics, c.log, c.cfg.StateDir)
	c.writer.report = func(o writeOutcome) { c.inbox.push(o) }
	c.writer.committed = c.batches.noteCommitted
	go c.writer.run()
	resolveCtx, stopResolver := context.WithCancel(context.Background())
	defer stopResolver()
	go c.resolver.run(resolveCtx)

	publish := time.NewTicker(2 * time.Second)
	defer publish.Stop()
	c.publishBudgets()
	c.publishShares()
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
		c.host.noteListed(c.idx) // nothing more of it will be listed
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
			// Take what else is waiting before handing the writes: the
			// writes due together are then one group commit, not one each.
			c.drainEvents()
		case <-c.inbox.wake:
			c.applyInbox()
			c.drainEvents()
		case <-publish.C:
			c.flushHistory()
			c.publishBudgets()
			c.publishShares()
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
		c.handWrites()
		if c.statusWritten {
			c.statusWritten = false
			c.countPhases(now, false)
		}
		if c.leave.leaving {
			return errLeft
		}
		if c.host.cfg.ExitWhenDone {
			c.host.noteSettled(c.idx, c.synced && c.filesSettled() && c.settled(), len(c.tasks.entries)+len(c.tasks.invalid))
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
	// that already holds it is not rewritten. The writer writes each once
	// more, failed ones included, and stops.
	for _, e := range c.tasks.entries {
		c.markDirty(e, true)
	}
	c.handWrites()
	c.writer.close()
	c.applyInbox()
	c.countPhases(time.Now(), true)
	c.flushHistory()
	_ = os.Remove(filepath.Join(c.cfg.StateDir, estimatesFile))
	_ = os.Remove(filepath.Join(c.cfg.StateDir, budgetsFile))
	_ = os.Remove(filepath.Join(c.cfg.StateDir, writeErrorsFile))
	return c.outcome()
}

// drainMax bounds how many waiting spool events one pass of Run takes
// before it hands the writes.
const drainMax = 1024

// takeEvent applies one spool event. REQUIRES: owner goroutine.
func (c *Controller) takeEvent(ev spool.Event) {
	if ev.Type == spool.Synced {
		c.synced = true
		// Through the resolver, behind the listing's own requests.
		c.resolver.requests.push(listedMark{})
		c.metrics.SetReady(true)
		c.log.Info().Int("tasks", len(c.tasks.entries)).Str("spool", c.cfg.SpoolDir).Msg("spool listed")
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
