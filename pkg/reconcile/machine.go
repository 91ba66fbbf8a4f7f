package reconcile

import (
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// SnapshotFunc takes a snapshot of the machine (the probe).
type SnapshotFunc func() (governor.Snapshot, error)

// DecisionObserver is told of every decision the governor takes for the
// queue (metrics count them by verdict and reason).
type DecisionObserver interface {
	ObserveDecision(d governor.Decision)
}

// machine is the queue's Admitter: the governor, fed by the probe.
type machine struct {
	gov      *governor.Governor
	snapshot SnapshotFunc
	// workMemory measures the controller's running batches, so that the
	// governor does not count them twice (see governor.Snapshot).
	workMemory func() int64
	decisions  DecisionObserver
	log        zerolog.Logger
	// minRefresh bounds how often the probe runs: scans can follow each
	// other within microseconds and the machine does not change that fast.
	minRefresh time.Duration

	mu struct {
		sync.Mutex
		last time.Time
		err  string
	}
}

var _ queue.Admitter = (*machine)(nil)

// Refresh hands the governor a fresh snapshot, at most every minRefresh.
func (m *machine) Refresh() {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if now.Sub(m.mu.last) < m.minRefresh {
		return
	}
	m.mu.last = now
	s, err := m.snapshot()
	if err != nil {
		if msg := err.Error(); msg != m.mu.err {
			m.mu.err = msg
			m.log.Warn().Err(err).Msg("probe failed; the governor keeps its last snapshot")
		}
		return
	}
	m.mu.err = ""
	if m.workMemory != nil {
		s.WorkMemoryUsage = m.workMemory()
	}
	m.gov.Update(s)
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

// Release returns a reservation to the governor.
func (m *machine) Release(r queue.Reservation) error {
	gr, ok := r.(governor.Reservation)
	if !ok {
		return fmt.Errorf("release: %T is not a governor reservation", r)
	}
	return m.gov.Release(gr)
}

// RecordBatch adds a finished batch to the governor's history.
func (m *machine) RecordBatch(class string, rec governor.BatchRecord) { m.gov.RecordBatch(class, rec) }

// Changed is closed at the governor's next generation change.
func (m *machine) Changed() <-chan struct{} { return m.gov.Changed() }
