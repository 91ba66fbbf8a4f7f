package governor

import (
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// The thresholds, the outside usage, the soft gate's wait with its
// numbers and hysteresis, and the hard level, on a 16Gi machine whose
// margin is 1Gi (soft 1Gi, hard 512Mi by default).
func TestMemoryPressureFromOutsideTheBatches(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(epoch)
	g := New(Config{MemoryReserved: Gi, Hysteresis: 10 * time.Second}, WithClock(clk))
	at := func(avail, batches int64) MemoryPressure {
		g.Update(Snapshot{Taken: clk.Now(), MemTotal: 16 * Gi, MemAvailable: avail, CPUs: 8, WorkMemoryUsage: batches})
		return g.Pressure()
	}
	p := at(10*Gi, 2*Gi)
	if p.Level != PressureNone || p.Outside != 4*Gi || p.Soft != Gi || p.Hard != 512*Mi {
		t.Fatalf("10Gi free, batches 2Gi: %+v", p)
	}
	if d := g.Decide(est(nil)); d.Verdict != Admit {
		t.Fatalf("no pressure: %v", d)
	}
	p = at(900*Mi, 2*Gi)
	if p.Level != PressureSoft {
		t.Fatalf("900Mi free: %+v, want soft", p)
	}
	d := g.Decide(est(func(e *Estimate) { e.FixedMemory, e.PerItemMemory = Mi, 0 }))
	if d.Verdict != Wait || d.Reason != ReasonMemoryPressure {
		t.Fatalf("soft pressure: %v", d)
	}
	want := "memory pressure from outside the batches: 13.1GiB used by other programs, 900.0MiB free"
	if !strings.HasPrefix(d.Message(), want) {
		t.Errorf("message %q, want it to start %q", d.Message(), want)
	}
	if p = at(400*Mi, 2*Gi); p.Level != PressureHard {
		t.Fatalf("400Mi free: %+v, want hard", p)
	}
	// Back above: admissions wait out the hysteresis.
	clk.SetTime(epoch.Add(time.Second))
	if p = at(8*Gi, 0); p.Level != PressureSoft {
		t.Fatalf("back above, hysteresis running: %+v", p)
	}
	clk.SetTime(epoch.Add(10 * time.Second))
	if d := g.Decide(est(nil)); d.Reason != ReasonMemoryPressure {
		t.Fatalf("9s back above: %v", d)
	}
	clk.SetTime(epoch.Add(11 * time.Second))
	if d := g.Decide(est(nil)); d.Verdict != Admit {
		t.Fatalf("10s back above: %v", d)
	}
	if p = at(8*Gi, 0); p.Level != PressureNone || g.Budgets().Pressure.Outside != 8*Gi {
		t.Errorf("after: %+v, budgets %+v", p, g.Budgets().Pressure)
	}
}

// Thresholds can be set, or turned off; swap falling fast is hard pressure.
func TestMemoryPressureThresholdsAndSwap(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(epoch)
	g := New(Config{MemoryPressureSoft: 3 * Gi, MemoryPressureHard: 2 * Gi}, WithClock(clk))
	up := func(avail, swapFree int64) MemoryPressure {
		g.Update(Snapshot{Taken: clk.Now(), MemTotal: 16 * Gi, MemAvailable: avail, CPUs: 8, SwapTotal: 8 * Gi, SwapFree: swapFree})
		return g.Pressure()
	}
	if p := up(2500*Mi, 8*Gi); p.Level != PressureSoft || p.Soft != 3*Gi || p.Hard != 2*Gi {
		t.Fatalf("2.5Gi under soft 3Gi: %+v", p)
	}
	if p := up(1900*Mi, 8*Gi); p.Level != PressureHard {
		t.Fatalf("1.9Gi under hard 2Gi: %+v", p)
	}
	g = New(Config{MemoryPressureSoft: -1, MemoryPressureHard: -1}, WithClock(clk))
	if p := up(10*Mi, 8*Gi); p.Level != PressureNone || p.Soft != 0 || p.Hard != 0 {
		t.Fatalf("off: %+v", p)
	}
	// Plenty of RAM, swap falling 100Mi/s over a second: hard.
	for i, free := range []int64{8 * Gi, 8*Gi - 100*Mi} {
		clk.SetTime(epoch.Add(time.Duration(i) * time.Second))
		p := up(10*Gi, free)
		if i == 1 && (p.Level != PressureHard || p.SwapFalling != 100*Mi) {
			t.Fatalf("swap falling 100Mi/s: %+v", p)
		}
	}
	msg := EvictionMessage(3, g.Pressure(), []string{"python3 (pid 9) 4.0GiB"})
	for _, w := range []string{"batch 3 yielded", "swap falling 100.0MiB/s", "largest: python3 (pid 9) 4.0GiB", "no retry spent"} {
		if !strings.Contains(msg, w) {
			t.Errorf("eviction message %q lacks %q", msg, w)
		}
	}
	clk.SetTime(epoch.Add(2 * time.Second))
	if p := up(10*Gi, 8*Gi-100*Mi); p.Level != PressureNone {
		t.Errorf("swap steady: %+v", p)
	}
}

// The victim rule, as a table.
func TestChooseVictim(t *testing.T) {
	now := epoch.Add(time.Hour)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	c := func(task string, started time.Duration, threads int, reserved, used int64) VictimCandidate {
		return VictimCandidate{Task: task, Started: ago(started), Threads: threads, Reserved: reserved, Used: used}
	}
	for _, tc := range []struct {
		name    string
		cands   []VictimCandidate
		deficit int64
		want    string
	}{
		{"none", nil, Gi, ""},
		{"one", []VictimCandidate{c("a", time.Hour, 1, Gi, Gi)}, Gi, "a"},
		{"least lost work", []VictimCandidate{c("old", 30*time.Minute, 2, 2*Gi, Gi), c("young", 2*time.Minute, 2, 2*Gi, Gi)}, 0, "young"},
		{"lost work counts threads", []VictimCandidate{c("wide", 5*time.Minute, 8, 2*Gi, Gi), c("narrow", 10*time.Minute, 1, 2*Gi, Gi)}, 0, "narrow"},
		{"within a minute of lost work: the youngest", []VictimCandidate{c("a", 40*time.Second, 1, 2*Gi, Gi), c("b", 10*time.Second, 1, 2*Gi, Gi)}, 0, "b"},
		{"over its reservation first", []VictimCandidate{c("within", time.Minute, 1, 2*Gi, Gi), c("over", time.Hour, 4, Gi, 2*Gi)}, 0, "over"},
		{"the most over", []VictimCandidate{c("a", time.Minute, 1, Gi, Gi+Mi), c("b", time.Hour, 1, Gi, 2*Gi)}, 0, "b"},
		{"one that frees enough before one that does not", []VictimCandidate{c("small", time.Second, 1, Gi, 100*Mi), c("big", time.Hour, 4, 4*Gi, 3*Gi)}, Gi, "big"},
		{"none frees enough: the rule as usual", []VictimCandidate{c("a", time.Hour, 1, Gi, 100*Mi), c("b", time.Second, 1, Gi, 200*Mi)}, 4 * Gi, "b"},
		{"tie: the larger usage", []VictimCandidate{c("a", time.Minute, 1, 2*Gi, Gi), c("b", time.Minute, 1, 2*Gi, 1500*Mi)}, 0, "b"},
		{"tie: the name", []VictimCandidate{c("b", time.Minute, 1, 2*Gi, Gi), c("a", time.Minute, 1, 2*Gi, Gi)}, 0, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cands := range [][]VictimCandidate{tc.cands, reversed(tc.cands)} {
				got := ""
				if i := ChooseVictim(cands, tc.deficit, now); i >= 0 {
					got = cands[i].Task
				}
				if got != tc.want {
					t.Errorf("ChooseVictim = %q, want %q", got, tc.want)
				}
			}
		})
	}
}

func reversed(s []VictimCandidate) []VictimCandidate {
	out := make([]VictimCandidate, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}
