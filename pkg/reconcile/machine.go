package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
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
	snapshots snapshotCounter
	decisions DecisionObserver
	leases    leaseDirs
	// holds, when set, are the exec holds: a batch leaves room for those
	// waiting (holdBook.gate), and a release wakes them.
	holds *holdBook
}

var (
	_ queue.Admitter        = (*machine)(nil)
	_ queue.Decider         = (*machine)(nil)
	_ queue.FreshWaiter     = (*machine)(nil)
	_ queue.SnapshotCounter = (*machine)(nil)
)

// snapshotCounter is what the machine needs of the prober to tell the
// queue how fresh its snapshot is (*prober is one).
type snapshotCounter interface {
	FreshMark() (uint64, bool)
	Snapshots() uint64
}

// FreshMark: see queue.SnapshotCounter (the prober's count).
func (m *machine) FreshMark() (uint64, bool) {
	if m.snapshots == nil {
		return 0, false
	}
	return m.snapshots.FreshMark()
}

// Snapshots: see queue.SnapshotCounter.
func (m *machine) Snapshots() uint64 {
	if m.snapshots == nil {
		return 0
	}
	return m.snapshots.Snapshots()
}

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
	if m.holds != nil {
		d, batch, ok := m.holds.gate(m.gov, e)
		if !ok {
			if m.decisions != nil {
				m.decisions.ObserveDecision(d)
			}
			return d, nil, false
		}
		if batch < e.BatchMax {
			e = e.CappedAt(batch)
		}
	}
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
	if m.holds != nil {
		m.holds.kick()
	}
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
