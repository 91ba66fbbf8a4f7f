package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
)

// SnapshotFunc takes a snapshot of the machine (the probe). Only the
// prober's goroutine calls it.
type SnapshotFunc func() (governor.Snapshot, error)

// DecisionObserver is told of every decision the governor takes for the
// queue (metrics count them by verdict and reason).
type DecisionObserver interface {
	ObserveDecision(d governor.Decision)
}

// leaseDirs is what the machine needs of the scratch lease directories
// (*scratch.Leases): a non-blocking hand-off of a released lease's directory.
type leaseDirs interface {
	Release(dir string)
}

// machine is the queue's Admitter: the governor, fed by the prober. Every
// method is called with the queue's mutex held, so none may block: none
// probes, execs or touches a file (see doc.go, Locking).
type machine struct {
	gov       *governor.Governor
	kick      func() // asks the prober for a fresh snapshot; never blocks
	fresh     func(ctx context.Context)
	decisions DecisionObserver
	leases    leaseDirs
}

var (
	_ queue.Admitter    = (*machine)(nil)
	_ queue.Decider     = (*machine)(nil)
	_ queue.FreshWaiter = (*machine)(nil)
)

// Refresh asks the prober for a fresh snapshot and returns at once: the
// decisions that follow use the last snapshot the governor was handed (at
// most the probe interval old), the next ones the fresh one.
func (m *machine) Refresh() {
	if m.kick != nil {
		m.kick()
	}
}

// WaitFresh waits (bounded, no lock held) for a snapshot taken after the
// call; the queue calls it between a batch's end and its sequence break.
func (m *machine) WaitFresh(ctx context.Context) {
	if m.fresh != nil {
		m.fresh(ctx)
	}
}

// Reserve asks the governor and records the decision.
func (m *machine) Reserve(e governor.Estimate) (governor.Decision, queue.Reservation, bool) {
	d, r, ok := m.gov.Reserve(e)
	if m.decisions != nil {
		m.decisions.ObserveDecision(d)
	}
	if !ok {
		return d, nil, false
	}
	return d, r, true
}

// Decide asks the governor without reserving (the queue uses it to tell
// whether a task rejected for hardware may be offered again).
func (m *machine) Decide(e governor.Estimate) governor.Decision { return m.gov.Decide(e) }

// Release returns a reservation to the governor, then hands its scratch
// lease's directory, if any, for removal.
func (m *machine) Release(r queue.Reservation) error {
	gr, ok := r.(governor.Reservation)
	if !ok {
		return fmt.Errorf("release: %T is not a governor reservation", r)
	}
	err := m.gov.Release(gr)
	// A closed governor destroyed the reservation: its directory goes too.
	if err == nil || errors.Is(err, governor.ErrClosed) {
		if dir := gr.Contract().ScratchDir; dir != "" && m.leases != nil {
			m.leases.Release(dir)
		}
	}
	return err
}

// Changed is closed at the governor's next generation change.
func (m *machine) Changed() <-chan struct{} { return m.gov.Changed() }

// newMachine builds the prober and the queue's Admitter from the deps, and
// the scratch lease directories when deps.Scratch is nil (without volumes:
// nothing to clean at start-up).
func (c *Controller) newMachine(deps Deps) *machine {
	c.scratch = deps.Scratch
	if c.scratch == nil {
		c.scratch = scratch.New(c.cfg.SpoolDir, nil, deps.Logger)
	}
	c.batches.scratch = c.scratch
	c.prober = newProber(deps.Governor, deps.Snapshot, c.batches.workMemory, deps.Logger, nil, c.cfg.ProbeInterval)
	return &machine{gov: deps.Governor, kick: c.prober.Kick, fresh: c.prober.WaitFresh, decisions: c.metrics, leases: c.scratch}
}

// startMachine removes what a crashed controller left on the scratch
// volumes and starts the prober and the lease remover. stop, called once
// the queue closed, ends both and returns once every released lease's
// directory is removed. It does not wait for a probe in flight (nvidia-smi
// may take its whole timeout): the prober exits after it, and an Update of
// the closed governor changes nothing.
func (c *Controller) startMachine() (stop func()) {
	if n, err := c.scratch.RemoveLeftovers(); n > 0 || err != nil {
		c.log.Info().Int("removed", n).AnErr("error", err).Msg("scratch lease directories of a previous controller")
	}
	c.prober.freed = c.queue.Wake
	ctx, cancel := context.WithCancel(context.Background())
	go c.prober.run(ctx)
	removed := make(chan struct{})
	go func() { defer close(removed); c.scratch.Run(ctx) }()
	return func() {
		cancel()
		<-removed
	}
}
