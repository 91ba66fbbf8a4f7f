package reconcile

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// Defaults of the prober.
const (
	// DefaultProbeInterval is how often the prober hands the governor a
	// snapshot on its own. It is well under the queue's 500 ms rescan, so a
	// rescan always decides on a snapshot at most this old; a probe costs
	// about 0.3 ms (BenchmarkSnapshot), 0.15 % of a core at this rate.
	DefaultProbeInterval = 200 * time.Millisecond
	// probeMinGap is the least time between two probes: kicks closer than
	// that are served together, once the gap has passed.
	probeMinGap = 20 * time.Millisecond
	// idleProbeInterval is how often the prober probes on its own while
	// the queue is idle (prober.busy says no task is pending or holds a
	// worker): nothing decides on the snapshot then but what is published
	// every 2 s, and a task handed to an idle queue waits for a fresh one
	// first (FreshMark: the queue holds it). Probing every 200 ms was a third
	// of an idle controller's CPU.
	idleProbeInterval = 2 * time.Second
)

// prober is the only caller of the probe. One goroutine (run) hands the
// governor a snapshot at its start, then every interval and soon after each
// kick. Probing (which may exec nvidia-smi, up to its timeout) therefore
// never happens on the queue's or the controller's goroutines, and no lock
// of either is held while it runs: the queue only kicks (a non-blocking send
// on a buffered(1) channel), and decides on the last snapshot the governor
// was handed.
type prober struct {
	gov      *governor.Governor
	snapshot SnapshotFunc
	// workMemory measures the controller's running batches, so that the
	// governor does not count them twice (see governor.Snapshot).
	workMemory func() int64
	// freed, when set, is called after a snapshot that the governor says
	// freed resources (Update reported true): it wakes the queue, which
	// otherwise rescans only every 500 ms while a task waits.
	freed func()
	// busy, when set, says whether the queue holds a task pending or
	// holding a worker; while it does not, ticks probe only every
	// idleProbeInterval. Called from the run goroutine, no lock held.
	busy     func() bool
	log      zerolog.Logger
	clock    clock.WithTicker
	interval time.Duration

	// afterUpdate, when set, is called after each snapshot handed to the
	// governor (the evictor's step), on the run goroutine, no lock held.
	afterUpdate func()

	// kick asks for a probe soon; buffered(1), sends never block.
	kick chan struct{}

	// Owned by the run goroutine.
	lastErr string

	mu struct {
		sync.Mutex
		// started and finished count probes; probed is closed when one
		// finishes (and replaced); at is when the last one started.
		started, finished uint64
		probed            chan struct{}
		at                time.Time
		// stuck is set when a WaitFresh ran out of time, and cleared when
		// a probe ends.
		stuck bool
		// wakeAt, when set, asks the probe that brings finished to it to
		// wake the queue (a task waits for it: FreshMark).
		wakeAt uint64
	}
}

func newProber(gov *governor.Governor, snapshot SnapshotFunc, workMemory func() int64, log zerolog.Logger, clk clock.WithTicker, interval time.Duration) *prober {
	if interval <= 0 {
		interval = DefaultProbeInterval
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	p := &prober{gov: gov, snapshot: snapshot, workMemory: workMemory, log: log, clock: clk, interval: interval, kick: make(chan struct{}, 1)}
	p.mu.probed = make(chan struct{})
	return p
}

// freshWait bounds WaitFresh: a probe stuck in nvidia-smi delays a sequence
// break by at most this much; the contract is then computed on the last
// snapshot, as before the wait.
const freshWait = 250 * time.Millisecond

// WaitFresh kicks and blocks until a probe that started after the call has
// been handed to the governor, ctx ends, or freshWait passes. No lock is
// held while it waits.
func (p *prober) WaitFresh(ctx context.Context) {
	p.mu.Lock()
	want := p.mu.started + 1
	p.mu.Unlock()
	p.Kick()
	t := p.clock.NewTimer(freshWait)
	defer t.Stop()
	for {
		p.mu.Lock()
		done, ch := p.mu.finished >= want, p.mu.probed
		p.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-t.C():
			p.mu.Lock()
			p.mu.stuck = true
			p.mu.Unlock()
			return
		}
	}
}

// stale reports whether the last probe started more than two intervals
// ago (the prober is probing at its idle pace), unless a WaitFresh already
// ran out of time since the last probe ended: a probe stuck in nvidia-smi
// costs one wait, not one per task handed to the queue. Any goroutine.
func (p *prober) stale() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lockedStale()
}

func (p *prober) lockedStale() bool {
	return !p.mu.stuck && p.clock.Since(p.mu.at) > 2*p.interval
}

// FreshMark is the queue's SnapshotCounter: the number of probes started
// so far, and whether the last is stale; when it is, a probe is kicked
// and the queue woken (freed) once one started after the call has been
// handed to the governor. It never blocks. Any goroutine.
func (p *prober) FreshMark() (uint64, bool) {
	p.mu.Lock()
	mark, stale := p.mu.started, p.lockedStale()
	if stale {
		p.mu.wakeAt = max(p.mu.wakeAt, mark+1)
	}
	p.mu.Unlock()
	if stale {
		p.Kick()
	}
	return mark, stale
}

// Snapshots is the number of probes finished: above a mark FreshMark
// returned once one started after it is handed to the governor.
func (p *prober) Snapshots() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.finished
}

// sinceLast is how long ago the last probe started. Any goroutine.
func (p *prober) sinceLast() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clock.Since(p.mu.at)
}

// Kick asks for a fresh snapshot without waiting for it. It never blocks
// and may be called with any lock held.
func (p *prober) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// probeOnce is one synchronous step: probe the machine and hand the governor
// the snapshot. A failed probe leaves the governor its last snapshot.
// REQUIRES: the run goroutine (or a test standing in for it); no lock held.
func (p *prober) probeOnce() {
	p.mu.Lock()
	p.mu.started++
	p.mu.at = p.clock.Now()
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.mu.finished++
		p.mu.stuck = false
		close(p.mu.probed)
		p.mu.probed = make(chan struct{})
		wake := p.mu.wakeAt != 0 && p.mu.finished >= p.mu.wakeAt
		if wake {
			p.mu.wakeAt = 0
		}
		p.mu.Unlock()
		if wake && p.freed != nil {
			p.freed()
		}
	}()
	s, err := p.snapshot()
	if err != nil {
		if msg := err.Error(); msg != p.lastErr {
			p.lastErr = msg
			p.log.Warn().Err(err).Msg("probe failed; the governor keeps its last snapshot")
		}
		return
	}
	p.lastErr = ""
	if p.workMemory != nil {
		s.WorkMemoryUsage = p.workMemory()
	}
	if p.gov.Update(s) && p.freed != nil {
		p.freed()
	}
	if p.afterUpdate != nil {
		p.afterUpdate()
	}
}

// run probes at once, then on every tick (while the queue is idle, every
// idleProbeInterval) and kick, until ctx ends.
func (p *prober) run(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	// The ticker exists before the first probe, so whoever sees that
	// probe's effect can step a fake clock past the first tick.
	t := p.clock.NewTicker(p.interval)
	defer t.Stop()
	p.probeOnce()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if p.busy != nil && !p.busy() && p.sinceLast() < idleProbeInterval {
				continue
			}
		case <-p.kick:
			if wait := probeMinGap - p.sinceLast(); wait > 0 {
				gap := p.clock.NewTimer(wait)
				select {
				case <-ctx.Done():
					gap.Stop()
					return
				case <-gap.C():
				}
			}
		}
		// This probe serves every kick and tick made before it starts; one
		// made while it runs gets the next.
		select {
		case <-p.kick:
		default:
		}
		select {
		case <-t.C():
		default:
		}
		p.probeOnce()
	}
}
