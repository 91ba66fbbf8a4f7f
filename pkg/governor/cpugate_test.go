package governor

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// sustainedPressure feeds g a snapshot of 4 CPUs whose PSI cpu pressure
// never falls (90% of every interval stalled) each time it is called,
// after moving clk by step.
type sustainedPressure struct {
	g     *Governor
	clk   *clocktesting.FakePassiveClock
	total uint64
}

func (p *sustainedPressure) step(d time.Duration) {
	p.clk.SetTime(p.clk.Now().Add(d))
	p.total += uint64(d.Microseconds()) * 9 / 10
	p.g.Update(*snap(func(s *Snapshot) {
		s.Taken = p.clk.Now()
		s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: 90, SomeTotal: p.total}}
	}))
}

// waitsUntil steps the snapshots every 250ms up to the instant just before
// deadline, asking Reserve each time, and fails if anything is granted.
func (p *sustainedPressure) waitsUntil(t *testing.T, e Estimate, deadline time.Time) {
	t.Helper()
	for p.clk.Now().Add(250 * time.Millisecond).Before(deadline) {
		p.step(250 * time.Millisecond)
		if d, _, ok := p.g.Reserve(e); ok || d.Reason != ReasonCPUPressure {
			t.Fatalf("at %v (deadline %v): %v, want WAIT CPUPressure", p.clk.Now().Sub(epoch), deadline.Sub(epoch), d)
		}
	}
	p.clk.SetTime(deadline.Add(-time.Nanosecond))
	if d, _, ok := p.g.Reserve(e); ok || d.Reason != ReasonCPUPressure {
		t.Fatalf("1ns before the bound: %v, want WAIT CPUPressure", d)
	}
}

// TestCPUGateBoundsTheWaitWithNothingOfOursRunning: under CPU pressure
// that never falls, a demand is admitted exactly CPUGateMaxWait after the
// gate first held it back while no reservation was active, and not before;
// while a reservation is active the gate keeps holding new demands back,
// however long; once it is released the next demand waits the bound
// again. The message names the bound and the flag that turns the gate off.
func TestCPUGateBoundsTheWaitWithNothingOfOursRunning(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(epoch)
	g := New(Config{}, WithClock(clk))
	p := &sustainedPressure{g: g, clk: clk, total: 1 << 30}
	p.step(0)
	e := est(nil)

	d, _, ok := g.Reserve(e)
	if ok || d.Reason != ReasonCPUPressure || d.MaxWait != DefaultCPUGateMaxWait {
		t.Fatalf("first demand under pressure: %v (max wait %v)", d, d.MaxWait)
	}
	want := "CPU busy: 90% of the time, runnable tasks waited for a CPU (PSI), above the threshold 60%; " +
		"new admissions wait until it stays at or below for 10s, at most until 00:00:30 UTC (30s while none of our batches runs, --cpu-gate-max-wait); " +
		"--cpu-pressure-threshold -1 turns the CPU gate off"
	if d.Message() != want {
		t.Errorf("message:\n got %q\nwant %q", d.Message(), want)
	}
	start := clk.Now()
	p.waitsUntil(t, e, start.Add(DefaultCPUGateMaxWait))
	clk.SetTime(start.Add(DefaultCPUGateMaxWait))
	d, first, ok := g.Reserve(e)
	if !ok {
		t.Fatalf("at the bound: %v, want a grant", d)
	}
	if v := g.Budgets(); !v.LoadDeferred || !v.CPUGate || v.CPUGateMaxWait != DefaultCPUGateMaxWait {
		t.Errorf("budgets after the grant: deferred %v, gate %v, max wait %v; the pressure still defers", v.LoadDeferred, v.CPUGate, v.CPUGateMaxWait)
	}

	// Ours running (1 thread of 4: CPUs free, the pressure is foreign):
	// the gate keeps its role past twice the bound.
	p.waitsUntil(t, e, clk.Now().Add(2*DefaultCPUGateMaxWait+time.Second))
	if err := g.Release(first); err != nil {
		t.Fatal(err)
	}

	// Nothing of ours running again: the bound counts from the next
	// demand held back.
	p.step(250 * time.Millisecond)
	if d, _, ok := g.Reserve(e); ok || d.Reason != ReasonCPUPressure {
		t.Fatalf("after the release: %v, want WAIT CPUPressure", d)
	}
	start = clk.Now()
	p.waitsUntil(t, e, start.Add(DefaultCPUGateMaxWait))
	clk.SetTime(start.Add(DefaultCPUGateMaxWait))
	if d, _, ok := g.Reserve(e); !ok {
		t.Fatalf("the second bound: %v, want a grant", d)
	}
}

// TestCPUGateBoundSettings: the bound is configurable, Decide alone never
// starts it (only a Reserve held back does), a negative bound restores the
// unbounded gate, and a negative threshold, either one, turns the gate off.
func TestCPUGateBoundSettings(t *testing.T) {
	t.Run("configured bound", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(epoch)
		g := New(Config{CPUGateMaxWait: 5 * time.Second}, WithClock(clk))
		p := &sustainedPressure{g: g, clk: clk, total: 1 << 30}
		p.step(0)
		for range 40 { // Decide observes; it starts no bound
			p.step(250 * time.Millisecond)
			if d := g.Decide(est(nil)); d.Reason != ReasonCPUPressure {
				t.Fatalf("Decide: %v", d)
			}
		}
		if d, _, ok := g.Reserve(est(nil)); ok || !strings.Contains(d.Message(), "at most until 00:00:15 UTC (5s while none of our batches runs") {
			t.Fatalf("first Reserve: %v %q", d, d.Message())
		}
		start := clk.Now()
		p.waitsUntil(t, est(nil), start.Add(5*time.Second))
		clk.SetTime(start.Add(5 * time.Second))
		if d := g.Decide(est(nil)); d.Verdict != Admit {
			t.Fatalf("Decide at the bound: %v", d)
		}
	})
	t.Run("negative bound never admits", func(t *testing.T) {
		clk := clocktesting.NewFakePassiveClock(epoch)
		g := New(Config{CPUGateMaxWait: -1}, WithClock(clk))
		p := &sustainedPressure{g: g, clk: clk, total: 1 << 30}
		p.step(0)
		p.waitsUntil(t, est(nil), epoch.Add(10*time.Minute))
		d, _, _ := g.Reserve(est(nil))
		if msg := d.Message(); strings.Contains(msg, "at most") || !strings.HasSuffix(msg, "; --cpu-pressure-threshold -1 turns the CPU gate off") {
			t.Errorf("unbounded message: %q", msg)
		}
	})
	for _, cfg := range []Config{{CPUPressureThreshold: -1}, {LoadThreshold: -1}} {
		clk := clocktesting.NewFakePassiveClock(epoch)
		g := New(cfg, WithClock(clk))
		g.Update(*snap(func(s *Snapshot) { s.Load1 = 70; s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: 99}} }))
		if d, _, ok := g.Reserve(est(nil)); !ok {
			t.Errorf("%+v: %v, want the gate off", cfg, d)
		}
		if g.Budgets().CPUGate {
			t.Errorf("%+v: Budgets says the gate is on", cfg)
		}
	}
}
