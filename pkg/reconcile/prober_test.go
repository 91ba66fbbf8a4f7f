package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// TestProberProbesAtStartOnTicksAndOnKicks steps a fake clock: the prober
// probes once at start, once per interval, at once on a kick (at most every
// probeMinGap; kicks in between coalesce), keeps the governor's last
// snapshot when a probe fails, and wakes the queue (freed) only when a
// snapshot freed resources.
func TestProberProbesAtStartOnTicksAndOnKicks(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	probes := make(chan struct{}, 16)
	var mu sync.Mutex // guards avail and fail
	avail := 4 * gi
	var fail error
	set := func(a int64, err error) { mu.Lock(); avail, fail = a, err; mu.Unlock() }
	snapshot := func() (governor.Snapshot, error) {
		defer func() { probes <- struct{}{} }()
		mu.Lock()
		defer mu.Unlock()
		if fail != nil {
			return governor.Snapshot{}, fail
		}
		return governor.Snapshot{Taken: clk.Now(), MemTotal: 8 * gi, MemAvailable: avail, CPUs: 2}, nil
	}
	gov := governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1})
	p := newProber(gov, snapshot, nil, zerolog.Nop(), clk, 100*time.Millisecond)
	freed := make(chan struct{}, 16)
	p.freed = func() { freed <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	defer func() { cancel(); <-done }()

	var finished uint64
	probed := func(what string) {
		t.Helper()
		select {
		case <-probes:
		case <-time.After(guardTimeout):
			t.Fatalf("no probe: %s", what)
		}
		// The snapshot function returned; wait until the prober is done
		// with it (the governor updated), so the checks below see it.
		finished++
		waitProbesFinished(t, p, finished)
	}
	none := func(what string) {
		t.Helper()
		select {
		case <-probes:
			t.Fatalf("unexpected probe: %s", what)
		default:
		}
	}
	probed("at start")
	if !gov.Budgets().HaveSnapshot {
		t.Fatal("the first probe did not reach the governor")
	}
	none("before the first tick")
	clk.Step(100 * time.Millisecond)
	probed("on the tick")

	// A kick right after a probe waits for the minimum gap, then probes
	// once for every kick made meanwhile.
	p.Kick()
	waitForGapTimer(t, clk)
	p.Kick()
	p.Kick()
	clk.Step(probeMinGap)
	probed("on the kicks, after the gap")
	none("the kicks coalesce")

	// A kick after the gap probes at once: no clock step needed.
	clk.Step(probeMinGap)
	p.Kick()
	probed("on a kick after the gap")

	// A failed probe keeps the last snapshot.
	taken := gov.Budgets().Taken
	set(4*gi, errors.New("meminfo: input/output error"))
	clk.Step(100 * time.Millisecond)
	probed("failing")
	if got := gov.Budgets().Taken; !got.Equal(taken) {
		t.Errorf("a failed probe changed the governor's snapshot: taken %v, was %v", got, taken)
	}
	set(4*gi, nil)

	// Freed resources wake the queue; the same memory does not.
	select {
	case <-freed:
		t.Fatal("woke the queue without freed resources")
	default:
	}
	set(6*gi, nil)
	clk.Step(100 * time.Millisecond)
	probed("with more memory")
	select {
	case <-freed:
	case <-time.After(guardTimeout):
		t.Fatal("2GiB freed did not wake the queue")
	}

	// WaitFresh (the queue's, between a batch and its sequence break)
	// returns once a probe started after the call reached the governor.
	clk.Step(probeMinGap)
	ret := make(chan struct{})
	go func() { defer close(ret); p.WaitFresh(context.Background()) }()
	probed("for WaitFresh")
	select {
	case <-ret:
	case <-time.After(guardTimeout):
		t.Fatal("WaitFresh did not return after a fresh probe")
	}
}

// waitForGapTimer blocks until the prober waits on its gap timer (the
// ticker is always a waiter: a second one is the timer).
// waitProbesFinished waits until the prober has handed n snapshots to the
// governor (or failed them).
func waitProbesFinished(t *testing.T, p *prober, n uint64) {
	t.Helper()
	for deadline := time.Now().Add(guardTimeout); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		f := p.mu.finished
		p.mu.Unlock()
		if f >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d probes finished, want %d", f, n)
		}
	}
}

func waitForGapTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(guardTimeout)
	for clk.Waiters() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the prober never waited for the gap")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestProberProbesLessWhileTheQueueIsIdle: while busy says the queue holds
// nothing pending or running, ticks probe only every idleProbeInterval
// (kicks still probe at once); the prober is then stale, which
// Controller.freshForQueue waits on before handing the queue a task.
func TestProberProbesLessWhileTheQueueIsIdle(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	probes := make(chan time.Time, 64)
	snapshot := func() (governor.Snapshot, error) {
		probes <- clk.Now()
		return governor.Snapshot{Taken: clk.Now(), MemTotal: 8 * gi, MemAvailable: 4 * gi, CPUs: 2}, nil
	}
	const interval = 100 * time.Millisecond
	p := newProber(governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1}), snapshot, nil, zerolog.Nop(), clk, interval)
	var busy atomic.Bool
	p.busy = busy.Load
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	defer func() { cancel(); <-done }()
	next := func(what string) time.Time {
		t.Helper()
		select {
		case at := <-probes:
			return at
		case <-time.After(guardTimeout):
			t.Fatalf("no probe: %s", what)
			return time.Time{}
		}
	}
	start := next("at start")
	// Idle: the ticks of the first idleProbeInterval probe nothing; the
	// one at idleProbeInterval does.
	for range idleProbeInterval / interval {
		clk.Step(interval)
	}
	if at := next("idle, after idleProbeInterval"); at.Sub(start) != idleProbeInterval {
		t.Errorf("idle: the second probe came %v after the first, want %v", at.Sub(start), idleProbeInterval)
	}
	if p.stale() {
		t.Error("stale right after a probe")
	}
	for range 3 {
		clk.Step(interval)
	}
	if !p.stale() {
		t.Error("not stale three idle intervals after the last probe")
	}
	// Busy: every tick probes.
	busy.Store(true)
	for i := range 3 {
		clk.Step(interval)
		next(fmt.Sprintf("busy, tick %d", i))
	}
	if p.stale() {
		t.Error("stale while busy")
	}
	select {
	case at := <-probes:
		t.Errorf("an extra probe at %v", at)
	default:
	}
}

// TestAStuckProbeCostsOneWait: a probe that hangs (nvidia-smi) makes the
// prober stale; the first WaitFresh runs out of time, and from then on the
// prober is not stale (freshForQueue does not wait once per task) until a
// probe ends.
func TestAStuckProbeCostsOneWait(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	release := make(chan struct{})
	var calls atomic.Int32
	snapshot := func() (governor.Snapshot, error) {
		if calls.Add(1) == 2 {
			<-release // the second probe hangs
		}
		return governor.Snapshot{Taken: clk.Now(), MemTotal: 8 * gi, MemAvailable: 4 * gi, CPUs: 2}, nil
	}
	const interval = 100 * time.Millisecond
	p := newProber(governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1}), snapshot, nil, zerolog.Nop(), clk, interval)
	var busy atomic.Bool
	busy.Store(true)
	p.busy = busy.Load
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.run(ctx) }()
	defer func() { cancel(); close(release); <-done }()
	waitProbesFinished(t, p, 1)
	clk.Step(interval) // the second probe starts and hangs
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	clk.Step(3 * interval)
	if !p.stale() {
		t.Fatal("not stale while the last probe hangs")
	}
	waited := make(chan struct{})
	go func() { defer close(waited); p.WaitFresh(context.Background()) }()
	for clk.Waiters() < 2 { // the ticker and WaitFresh's timer
		time.Sleep(time.Millisecond)
	}
	clk.Step(freshWait)
	select {
	case <-waited:
	case <-time.After(guardTimeout):
		t.Fatal("WaitFresh did not give up")
	}
	if p.stale() {
		t.Error("stale again after a WaitFresh ran out of time: every task would wait for the stuck probe")
	}
	// Idle from now on: only the kick WaitFresh left probes (a third
	// probe), then no tick for idleProbeInterval.
	busy.Store(false)
	release <- struct{}{}
	waitProbesFinished(t, p, 3)
	clk.Step(3 * interval)
	if !p.stale() {
		t.Error("not stale once the stuck probe ended and the prober went idle")
	}
}

// TestFreshMarkWakesTheQueueOnceAFreshSnapshotIsTaken: a task handed to
// the queue on a stale snapshot (the prober at its idle pace, or not yet
// started) asks for a probe; the probe that follows wakes the queue once,
// and the snapshot count passes the mark. A fresh snapshot asks nothing.
func TestFreshMarkWakesTheQueueOnceAFreshSnapshotIsTaken(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	snapshot := func() (governor.Snapshot, error) { return fixedMachine(), nil }
	p := newProber(governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1}), snapshot, nil, zerolog.Nop(), clk, 100*time.Millisecond)
	woken := 0
	p.freed = func() { woken++ }
	mark, stale := p.FreshMark() // before any probe
	if !stale || mark != 0 {
		t.Fatalf("before the first probe: mark %d, stale %v", mark, stale)
	}
	p.probeOnce()
	if woken != 1 || p.Snapshots() <= mark {
		t.Fatalf("after the probe: woken %d times, %d snapshots for mark %d", woken, p.Snapshots(), mark)
	}
	if _, stale := p.FreshMark(); stale {
		t.Error("stale right after a probe")
	}
	p.probeOnce()
	if woken != 1 {
		t.Errorf("a probe nobody waited for woke the queue (%d)", woken)
	}
	clk.Step(time.Second) // the idle pace
	mark, stale = p.FreshMark()
	if !stale {
		t.Fatal("not stale after an idle second")
	}
	p.probeOnce()
	if woken != 2 || p.Snapshots() <= mark {
		t.Errorf("after the idle spell's probe: woken %d, %d snapshots for mark %d", woken, p.Snapshots(), mark)
	}
}
