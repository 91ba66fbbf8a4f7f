package governor

import (
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

const (
	Ki int64 = 1 << 10
	Mi int64 = 1 << 20
	Gi int64 = 1 << 30
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// est returns a small valid estimate, modified by f.
func est(f func(*Estimate)) Estimate {
	e := Estimate{FixedMemory: 100 * Mi, PerItemMemory: 10 * Mi, BatchMin: 1, BatchMax: 10, Threads: 1, MinThreads: 1}
	if f != nil {
		f(&e)
	}
	return e
}

// snap returns an 8Gi, 4-CPU snapshot, modified by f.
func snap(f func(*Snapshot)) *Snapshot {
	s := &Snapshot{Taken: epoch, MemTotal: 8 * Gi, MemAvailable: 8 * Gi, CPUs: 4}
	if f != nil {
		f(s)
	}
	return s
}

func TestDecideTable(t *testing.T) {
	dedicated := func(s *Snapshot) {
		s.GPUs = []GPU{{ID: "0", Name: "rtx", Known: true, TotalBytes: 8 * Gi, FreeBytes: 8 * Gi}}
	}
	gpuEst := func(e *Estimate) { e.FixedGPUMemory, e.PerItemGPUMemory, e.GPUSlots = Gi, 100*Mi, 1 }
	tests := []struct {
		name    string
		cfg     Config
		snap    *Snapshot // nil: no Update
		held    []Estimate
		closed  bool
		e       Estimate
		verdict Verdict
		reason  Reason
		budget  Budget
		batch   int64
		threads int
		msg     string // substring of Message
	}{
		{name: "admit", snap: snap(nil), e: est(nil), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1,
			msg: "granted batch 10 of 10 at 1 thread, 200.0MiB"},
		{name: "seed example: 128 items give a contract of 37", snap: snap(func(s *Snapshot) { s.MemAvailable = 3762 * Mi }),
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.BatchMax, e.Threads, e.MinThreads = Gi, 60*Mi, 128, 2, 2
			}),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 37, threads: 2,
			msg: "granted batch 37 of 128 at 2 threads, 3.2GiB"},
		// 62 of the 64 items left fit: two even batches, not 62 + 2.
		{name: "a tail is evened out", snap: snap(func(s *Snapshot) { s.MemAvailable = 512*Mi + 100*Mi + 62*10*Mi }),
			e:       est(func(e *Estimate) { e.BatchMax, e.ItemsLeft = 64, 64 }),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 32, threads: 1,
			msg: "granted batch 32 of 64 (64 items left, 2 even batches) at 1 thread, 420.0MiB"},
		// The batch asked (30) fits; 64 items left run in three batches of 22 or
		// fewer (22 + 21 + 21, evened again at each boundary),
		// as asked: not a reduction.
		{name: "batch.max evened out over the items left", snap: snap(nil),
			e:       est(func(e *Estimate) { e.BatchMax, e.ItemsLeft = 30, 64 }),
			verdict: Admit, reason: ReasonFits, batch: 22, threads: 1,
			msg: "granted batch 22 of 30 (64 items left, 3 even batches)"},
		{name: "an even split never goes under batch.min", snap: snap(func(s *Snapshot) { s.MemAvailable = 512*Mi + 100*Mi + 62*10*Mi }),
			e:       est(func(e *Estimate) { e.BatchMin, e.BatchMax, e.ItemsLeft = 40, 64, 64 }),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 40, threads: 1},
		{name: "items left not said: the largest batch", snap: snap(func(s *Snapshot) { s.MemAvailable = 512*Mi + 100*Mi + 62*10*Mi }),
			e:       est(func(e *Estimate) { e.BatchMax = 64 }),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 62, threads: 1},
		// Two tasks ready for 4 CPUs: the whole task (4.0GiB) would leave the
		// other less than half the memory. Each gets half, evened out.
		{name: "held to a share of memory beside a peer", snap: snap(nil),
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.BatchMax, e.ItemsLeft, e.Peers = 300*Mi, 60*Mi, 64, 64, 2
			}),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 32, threads: 1,
			msg: "granted batch 32 of 64 (64 items left, 2 even batches; a 1/2 share of memory, 2 tasks side by side) at 1 thread, 2.2GiB"},
		{name: "alone, a task takes what fits", snap: snap(nil),
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.BatchMax, e.ItemsLeft, e.Peers = 300*Mi, 60*Mi, 64, 64, 1
			}),
			verdict: Admit, reason: ReasonFits, batch: 64, threads: 1, msg: "granted batch 64 of 64 at 1 thread, 4.0GiB"},
		// Eight ready, four usable CPUs (of 5, one reserved): four side by
		// side, a quarter each.
		{name: "the share counts the CPU slots, not every peer", snap: snap(func(s *Snapshot) { s.CPUs = 5 }),
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.BatchMax, e.ItemsLeft, e.Peers = 300*Mi, 60*Mi, 64, 64, 8
			}),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 22, threads: 1,
			msg: "(64 items left, 3 even batches; a 1/4 share of memory, 4 tasks side by side)"},
		{name: "two threads a batch: two slots of four CPUs", snap: snap(func(s *Snapshot) { s.CPUs = 5 }),
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.BatchMax, e.ItemsLeft, e.Peers = 300*Mi, 60*Mi, 64, 64, 8
				e.Threads, e.MinThreads = 2, 2
			}),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 32, threads: 2, msg: "a 1/2 share of memory"},
		{name: "a batch within its share is not held", snap: snap(nil),
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.BatchMax, e.ItemsLeft, e.Peers = 300*Mi, 60*Mi, 30, 64, 2
			}),
			verdict: Admit, reason: ReasonFits, batch: 22, threads: 1, msg: "granted batch 22 of 30 (64 items left, 3 even batches) at"},
		// A 10-minute start per batch: two half batches side by side process
		// items slower than full ones one after the other.
		{name: "a long fixed time keeps the whole batch", snap: snap(nil),
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.BatchMax, e.ItemsLeft, e.Peers = 300*Mi, 60*Mi, 64, 64, 2
				e.BatchTime, e.ItemTime = 10*time.Minute, time.Second
			}),
			verdict: Admit, reason: ReasonFits, batch: 64, threads: 1},
		{name: "a short fixed time shares", snap: snap(nil),
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.BatchMax, e.ItemsLeft, e.Peers = 300*Mi, 60*Mi, 64, 64, 2
				e.BatchTime, e.ItemTime = time.Second, time.Second
			}),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 32, threads: 1, msg: "a 1/2 share"},
		{name: "a GPU task is not held to a share", snap: snap(dedicated), cfg: Config{GPUSlots: 2},
			e: est(func(e *Estimate) {
				gpuEst(e)
				e.FixedMemory, e.PerItemMemory, e.PerItemGPUMemory, e.BatchMax, e.ItemsLeft, e.Peers = 300*Mi, 60*Mi, 10*Mi, 64, 64, 2
			}),
			verdict: Admit, reason: ReasonFits, batch: 64, threads: 1},
		{name: "threads lowered before waiting", snap: snap(func(s *Snapshot) { s.MemAvailable = 762 * Mi }),
			e:       est(func(e *Estimate) { e.FixedMemory, e.PerItemMemory, e.PerThreadMemory, e.Threads = 28*Mi, 0, 87*Mi, 3 }),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 10, threads: 2, // 250Mi free: 28Mi + 2·87Mi
			msg: "granted batch 10 of 10 at 2 threads (of 3), 202.0MiB"},
		{name: "insufficient memory with the issue's message", cfg: Config{MemoryReserved: Gi},
			snap: snap(func(s *Snapshot) { s.MemTotal, s.MemAvailable, s.CPUs = 16*Gi, 16*Gi, 8 }),
			held: []Estimate{est(func(e *Estimate) { e.FixedMemory, e.PerItemMemory, e.BatchMax = 6500*Mi, 0, 1 }),
				est(func(e *Estimate) { e.FixedMemory, e.PerItemMemory, e.BatchMax = 6500*Mi, 0, 1 })},
			e: est(func(e *Estimate) {
				e.FixedMemory, e.PerItemMemory, e.PerThreadMemory, e.Threads, e.MinThreads = 4100*Mi, 50*Mi, 10*Mi, 2, 2
			}),
			verdict: Wait, reason: ReasonInsufficientMemory, budget: BudgetMemory, batch: 1, threads: 2,
			msg: "needs 4.1GiB for a batch of 1 at 2 threads; 2.3GiB free after 2 reservations (margin 1.0GiB)"},
		{name: "insufficient GPU memory", snap: snap(dedicated),
			held: []Estimate{est(func(e *Estimate) { gpuEst(e); e.FixedGPUMemory = 7 * Gi; e.PerItemGPUMemory = 0 })},
			cfg:  Config{GPUSlots: 2},
			e:    est(gpuEst), verdict: Wait, reason: ReasonInsufficientGPUMemory, budget: BudgetGPUMemory, batch: 1, threads: 1,
			msg: "needs 1.1GiB of GPU memory for a batch of 1 at 1 thread; 614.4MiB free after 1 reservation (margin 409.6MiB)"},
		{name: "dedicated GPU reduces the batch", snap: snap(dedicated),
			e:       est(func(e *Estimate) { gpuEst(e); e.BatchMax = 1000 }),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: (8*Gi - 8*Gi/100*5 - Gi) / (100 * Mi), threads: 1},
		{name: "GPU unknown", snap: snap(func(s *Snapshot) { s.GPUs = []GPU{{ID: "0"}} }),
			e: est(gpuEst), verdict: Wait, reason: ReasonGPUUnknown, budget: BudgetGPUMemory, batch: 1, threads: 1},
		{name: "GPU unknown made known by configuration", cfg: Config{GPUMemory: 4 * Gi},
			snap: snap(func(s *Snapshot) { s.GPUs = []GPU{{ID: "0"}} }),
			e:    est(gpuEst), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1},
		{name: "no GPU", snap: snap(nil), e: est(gpuEst), verdict: Reject, reason: ReasonNoGPU, budget: BudgetGPUMemory, batch: 1, threads: 1},
		{name: "unified GPU counts in RAM", snap: snap(func(s *Snapshot) {
			s.MemAvailable = 3 * Gi
			s.GPUs = []GPU{{ID: "apu", Unified: true}}
		}), e: est(func(e *Estimate) { gpuEst(e); e.BatchMax = 100 }), verdict: ReduceBatch, reason: ReasonBatchReduced,
			batch: (3*Gi - 512*Mi - 100*Mi - Gi) / (110 * Mi), threads: 1},
		{name: "unified GPU exceeds capacity", snap: snap(func(s *Snapshot) { s.GPUs = []GPU{{ID: "apu", Unified: true}} }),
			e: est(func(e *Estimate) { gpuEst(e); e.FixedGPUMemory = 8 * Gi }), verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetMemory, batch: 1, threads: 1},
		{name: "dedicated GPU exceeds capacity", snap: snap(dedicated),
			e: est(func(e *Estimate) { gpuEst(e); e.FixedGPUMemory = 8 * Gi }), verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetGPUMemory, batch: 1, threads: 1},
		{name: "no free CPU", snap: snap(nil), held: []Estimate{est(func(e *Estimate) { e.Threads = 3 })},
			e: est(nil), verdict: Wait, reason: ReasonNoFreeCPU, budget: BudgetCPU, batch: 1, threads: 1,
			msg: "needs 1 thread; 0 free after 1 reservation (1 CPUs reserved for the system)"},
		{name: "threads capped by free CPUs", snap: snap(nil), held: []Estimate{est(func(e *Estimate) { e.Threads = 2 })},
			e: est(func(e *Estimate) { e.Threads = 3 }), verdict: ReduceBatch, reason: ReasonBatchReduced, batch: 10, threads: 1},
		{name: "two CPUs reserve none", snap: snap(func(s *Snapshot) { s.CPUs = 2 }),
			e: est(func(e *Estimate) { e.Threads = 2 }), verdict: Admit, reason: ReasonFits, batch: 10, threads: 2},
		{name: "minThreads above usable CPUs", snap: snap(nil), e: est(func(e *Estimate) { e.Threads, e.MinThreads = 4, 4 }),
			verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetCPU, batch: 1, threads: 4},
		{name: "load high", snap: snap(func(s *Snapshot) { s.Load1 = 7 }), e: est(nil),
			verdict: Wait, reason: ReasonLoadHigh, budget: BudgetLoad, batch: 1, threads: 1,
			msg: "CPU busy: 1-minute load average 7.00 (less the threads of running batches), above the threshold 6.00; new admissions wait"},
		{name: "cpu pressure replaces the load average where PSI is", snap: snap(func(s *Snapshot) { s.Load1 = 7; s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: 78.2}} }),
			e: est(nil), verdict: Wait, reason: ReasonCPUPressure, budget: BudgetCPUPSI, batch: 1, threads: 1,
			msg: "CPU busy: 78% of the time, runnable tasks waited for a CPU (PSI), above the threshold 60%; new admissions wait"},
		{name: "a high load average with low cpu pressure admits", snap: snap(func(s *Snapshot) { s.Load1 = 70; s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: 20}} }),
			e: est(nil), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1},
		{name: "cpu pressure threshold negative turns the load average off too", cfg: Config{CPUPressureThreshold: -1},
			snap: snap(func(s *Snapshot) { s.Load1 = 7; s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: 95}} }),
			e:    est(nil), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1},
		{name: "cpu pressure threshold negative without PSI", cfg: Config{CPUPressureThreshold: -1},
			snap: snap(func(s *Snapshot) { s.Load1 = 70 }), e: est(nil), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1},
		{name: "load threshold negative turns cpu pressure off too", cfg: Config{LoadThreshold: -1},
			snap: snap(func(s *Snapshot) { s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: 99}} }),
			e:    est(nil), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1},
		{name: "cpu pressure threshold set", cfg: Config{CPUPressureThreshold: 90},
			snap: snap(func(s *Snapshot) { s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: 78}} }),
			e:    est(nil), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1},
		{name: "load threshold disabled", cfg: Config{LoadThreshold: -1}, snap: snap(func(s *Snapshot) { s.Load1 = 70 }),
			e: est(nil), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1},
		{name: "io pressure", snap: snap(func(s *Snapshot) { s.PSI = PSI{Available: true, IO: Pressure{SomeAvg10: 55}} }),
			e: est(func(e *Estimate) { e.IOSlots = 1 }), verdict: Wait, reason: ReasonIOPressure, budget: BudgetIOPSI, batch: 1, threads: 1,
			msg: "io pressure 55.0%, above the threshold 40.0%; new admissions holding IO slots wait until it stays at or below for 10s"},
		{name: "io pressure spares demands without IO slots", snap: snap(func(s *Snapshot) { s.PSI = PSI{Available: true, IO: Pressure{SomeAvg10: 55}} }),
			e: est(nil), verdict: Admit, reason: ReasonFits, batch: 10, threads: 1},
		{name: "no IO slot", snap: snap(nil), held: []Estimate{est(func(e *Estimate) { e.IOSlots = 2 })},
			e: est(func(e *Estimate) { e.IOSlots = 1 }), verdict: Wait, reason: ReasonNoIOSlot, budget: BudgetIOSlots, batch: 1, threads: 1,
			msg: "needs 1 IO slot; 0 free after 1 reservation"},
		{name: "IO slots exceed capacity", snap: snap(nil), e: est(func(e *Estimate) { e.IOSlots = 3 }),
			verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetIOSlots, batch: 1, threads: 1},
		{name: "no GPU slot", snap: snap(dedicated), held: []Estimate{est(func(e *Estimate) { e.GPUSlots = 1 })},
			e: est(gpuEst), verdict: Wait, reason: ReasonNoGPUSlot, budget: BudgetGPUSlots, batch: 1, threads: 1},
		{name: "GPU slots exceed capacity", snap: snap(dedicated), e: est(func(e *Estimate) { gpuEst(e); e.GPUSlots = 2 }),
			verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetGPUSlots, batch: 1, threads: 1},
		{name: "no scratch volume", snap: snap(nil), e: est(func(e *Estimate) { e.ScratchBytes = Gi }),
			verdict: Reject, reason: ReasonNoScratch, budget: BudgetScratch, batch: 1, threads: 1},
		{name: "scratch short", snap: snap(func(s *Snapshot) { s.Scratch = []ScratchVolume{{Path: "/scratch", FreeBytes: Gi}} }),
			e: est(func(e *Estimate) { e.ScratchBytes = 2 * Gi }), verdict: Wait, reason: ReasonNoScratch, budget: BudgetScratch, batch: 1, threads: 1,
			msg: "needs 2.0GiB of scratch; 1.0GiB free on the best volume after 0 reservations"},
		{name: "memory exceeds capacity", snap: snap(nil), e: est(func(e *Estimate) { e.FixedMemory = 8 * Gi }),
			verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetMemory, batch: 1, threads: 1,
			msg: "needs 8.0GiB for a batch of 1 at 1 thread; the machine can never grant more than 7.5GiB (margin 512.0MiB)"},
		{name: "cgroup limit bounds capacity", snap: snap(func(s *Snapshot) { s.CgroupMemoryLimit = 2 * Gi }),
			e: est(func(e *Estimate) { e.FixedMemory = 1600 * Mi }), verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetMemory, batch: 1, threads: 1},
		{name: "configured capacity bounds capacity", cfg: Config{MemoryCapacity: 2 * Gi}, snap: snap(nil),
			e: est(func(e *Estimate) { e.FixedMemory = 1600 * Mi }), verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetMemory, batch: 1, threads: 1},
		{name: "overflowing demand", snap: snap(nil), e: est(func(e *Estimate) { e.PerItemMemory, e.BatchMin, e.BatchMax = math.MaxInt64/2, 3, 3 }),
			verdict: Reject, reason: ReasonExceedsCapacity, budget: BudgetMemory, batch: 3, threads: 1, msg: "needs more than 8.0EiB"},
		{name: "huge batch max computed by division", snap: snap(nil), e: est(func(e *Estimate) { e.PerItemMemory, e.BatchMax = Mi, math.MaxInt64 }),
			verdict: ReduceBatch, reason: ReasonBatchReduced, batch: (8*Gi - 512*Mi - 100*Mi) / Mi, threads: 1},
		{name: "swap is never counted", snap: snap(func(s *Snapshot) {
			s.MemAvailable, s.SwapTotal, s.SwapFree, s.ZramTotal, s.ZramFree = Gi, 64*Gi, 64*Gi, 8*Gi, 8*Gi
		}),
			e: est(func(e *Estimate) { e.FixedMemory = Gi }), verdict: Wait, reason: ReasonInsufficientMemory, budget: BudgetMemory, batch: 1, threads: 1},
		{name: "invalid batch min", snap: snap(nil), e: est(func(e *Estimate) { e.BatchMin = 0 }), verdict: Reject, reason: ReasonInvalidEstimate,
			batch: 0, threads: 1, msg: "invalid estimate: batch.min must be >= 1"},
		{name: "invalid batch max", snap: snap(nil), e: est(func(e *Estimate) { e.BatchMax = 0 }), verdict: Reject, reason: ReasonInvalidEstimate, batch: 1, threads: 1},
		{name: "invalid threads", snap: snap(nil), e: est(func(e *Estimate) { e.Threads, e.MinThreads = 0, 0 }), verdict: Reject, reason: ReasonInvalidEstimate, batch: 1, threads: 1},
		{name: "invalid minThreads", snap: snap(nil), e: est(func(e *Estimate) { e.MinThreads = 2 }), verdict: Reject, reason: ReasonInvalidEstimate, batch: 1, threads: 2},
		{name: "negative amount", snap: snap(nil), e: est(func(e *Estimate) { e.PerThreadMemory = -1 }), verdict: Reject, reason: ReasonInvalidEstimate, batch: 1, threads: 1},
		{name: "no snapshot", e: est(nil), verdict: Wait, reason: ReasonNoSnapshot, batch: 1, threads: 1, msg: "no snapshot"},
		{name: "closed", snap: snap(nil), closed: true, e: est(nil), verdict: Wait, reason: ReasonClosed, batch: 1, threads: 1, msg: "closed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := New(tc.cfg, WithClock(clocktesting.NewFakePassiveClock(epoch)))
			if tc.snap != nil {
				g.Update(*tc.snap)
			}
			for _, h := range tc.held {
				if d, _, ok := g.Reserve(h); !ok {
					t.Fatalf("held reservation refused: %v", d)
				}
			}
			if tc.closed {
				if err := g.Close(); err != nil {
					t.Fatal(err)
				}
			}
			before := g.Budgets()
			d := g.Decide(tc.e)
			if d.Verdict != tc.verdict || d.Reason != tc.reason || d.Budget != tc.budget || d.Batch != tc.batch || d.Threads != tc.threads {
				t.Fatalf("Decide = %s %s budget=%q batch=%d threads=%d (%s), want %s %s budget=%q batch=%d threads=%d",
					d.Verdict, d.Reason, d.Budget, d.Batch, d.Threads, d.Message(), tc.verdict, tc.reason, tc.budget, tc.batch, tc.threads)
			}
			if !strings.Contains(d.Message(), tc.msg) {
				t.Errorf("Message() = %q, want it to contain %q", d.Message(), tc.msg)
			}
			if after := g.Budgets(); after.Memory != before.Memory || after.Reservations != before.Reservations {
				t.Errorf("Decide changed the budgets: %+v, then %+v", before.Memory, after.Memory)
			}
			// Reserve agrees with Decide and reserves only on a grant; a
			// Reserve the CPU gate holds back starts the gate's bound
			// and says until when it holds (Decide never starts it).
			d2, r, ok := g.Reserve(tc.e)
			if (d2.Reason == ReasonCPUPressure || d2.Reason == ReasonLoadHigh) && d.GateUntil.IsZero() {
				if want := g.clock.Now().Add(DefaultCPUGateMaxWait); !d2.GateUntil.Equal(want) {
					t.Errorf("Reserve held back by the CPU gate: until %v, want %v", d2.GateUntil, want)
				}
				d2.GateUntil = time.Time{}
			}
			if d2 != d {
				t.Errorf("Reserve decided %+v, Decide %+v", d2, d)
			}
			if ok != (d.Verdict == Admit || d.Verdict == ReduceBatch) {
				t.Errorf("Reserve ok = %v for %s", ok, d.Verdict)
			}
			if ok {
				c := r.Contract()
				if c.Batch != d.Batch || c.Threads != d.Threads || c.MemoryBytes+c.GPUMemoryBytes == 0 || c.BatchRequested != tc.e.BatchMax {
					t.Errorf("contract %+v does not match decision %+v", c, d)
				}
				if err := g.Release(r); err != nil {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
}

func TestReleaseExactlyOnce(t *testing.T) {
	g := New(Config{}, WithClock(clocktesting.NewFakePassiveClock(epoch)))
	g.Update(*snap(func(s *Snapshot) { s.Scratch = []ScratchVolume{{Path: "/scratch/", FreeBytes: 10 * Gi}} }))
	_, r, ok := g.Reserve(est(func(e *Estimate) { e.ScratchBytes = Gi; e.IOSlots = 1; e.Threads = 2 }))
	if !ok {
		t.Fatal("refused")
	}
	if got := r.Contract().ScratchDir; !regexp.MustCompile(`^/scratch/lardon3d-lease-1-[0-9a-f]{16}$`).MatchString(got) {
		t.Errorf("ScratchDir = %q", got)
	}
	if !g.Active(r) {
		t.Error("reservation not active")
	}
	held := g.Budgets()
	if held.Memory.Reserved != 200*Mi || held.CPU.Reserved != 2 || held.IOSlots.Reserved != 1 || held.Scratch[0].Bytes.Reserved != Gi {
		t.Fatalf("budgets while held: %+v", held)
	}
	if err := g.Release(r); err != nil {
		t.Fatal(err)
	}
	empty := g.Budgets()
	if err := g.Release(r); !errors.Is(err, ErrAlreadyReleased) {
		t.Errorf("second Release = %v, want ErrAlreadyReleased", err)
	}
	// A new reservation reusing the slot does not resurrect the old one.
	_, r2, _ := g.Reserve(est(nil))
	if err := g.Release(r); !errors.Is(err, ErrAlreadyReleased) {
		t.Errorf("Release of a tombstone after slot reuse = %v", err)
	}
	if g.Active(r) || !g.Active(r2) {
		t.Error("Active confused the tombstone with the slot's new reservation")
	}
	if err := g.Release(r2); err != nil {
		t.Fatal(err)
	}
	if after := g.Budgets(); after.Memory != empty.Memory || after.CPU != empty.CPU || after.IOSlots != empty.IOSlots ||
		after.Scratch[0].Bytes != empty.Scratch[0].Bytes || after.Reservations != 0 {
		t.Errorf("budgets after releases %+v, want %+v", after, empty)
	}
	if err := g.Release(Reservation{}); !errors.Is(err, ErrUnknownReservation) {
		t.Errorf("Release(zero) = %v", err)
	}
	other := New(Config{})
	other.Update(*snap(nil))
	_, r3, _ := other.Reserve(est(nil))
	if err := g.Release(r3); !errors.Is(err, ErrUnknownReservation) {
		t.Errorf("Release of another governor's reservation = %v", err)
	}
}

func TestClose(t *testing.T) {
	g := New(Config{})
	g.Update(*snap(nil))
	_, r, _ := g.Reserve(est(nil))
	ch := g.Changed()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Error("Close did not wake Changed")
	}
	if err := g.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
	if err := g.Release(r); !errors.Is(err, ErrClosed) {
		t.Errorf("Release after Close = %v", err)
	}
	if d, _, ok := g.Reserve(est(nil)); ok || d.Reason != ReasonClosed {
		t.Errorf("Reserve after Close = %v, %v", d, ok)
	}
	if v := g.Budgets(); !v.Closed || v.Reservations != 0 || v.Memory.Reserved != 0 {
		t.Errorf("Budgets after Close = %+v", v)
	}
}

func TestGenerationAndNoRevocation(t *testing.T) {
	g := New(Config{})
	if g.Generation() != 0 {
		t.Fatal("generation before any snapshot")
	}
	ch := g.Changed()
	g.Update(*snap(nil))
	<-ch // closed by the first snapshot
	if g.Generation() != 1 {
		t.Fatalf("generation = %d", g.Generation())
	}
	ch = g.Changed()
	g.Update(*snap(func(s *Snapshot) { s.MemAvailable = 5 * Gi; s.Load1 = 1 })) // dynamic values only
	select {
	case <-ch:
		t.Fatal("dynamic values bumped the generation")
	default:
	}
	_, r, ok := g.Reserve(est(func(e *Estimate) { e.FixedMemory = 3 * Gi }))
	if !ok {
		t.Fatal("refused")
	}
	for i, f := range []func(*Snapshot){
		func(s *Snapshot) { s.CgroupMemoryLimit = 2 * Gi },
		func(s *Snapshot) { s.GPUs = []GPU{{ID: "0", Known: true, TotalBytes: Gi, FreeBytes: Gi}} },
		func(s *Snapshot) { s.Scratch = []ScratchVolume{{Path: "/s", FreeBytes: Gi}} },
		func(s *Snapshot) { s.CPUs = 8 },
	} {
		before := g.Generation()
		ch := g.Changed()
		g.Update(*snap(f))
		select {
		case <-ch:
		default:
			t.Errorf("change %d did not close Changed", i)
		}
		if g.Generation() != before+1 {
			t.Errorf("change %d: generation %d, want %d", i, g.Generation(), before+1)
		}
		g.Update(*snap(nil)) // and back: another change
	}
	// The cgroup limit shrinks below what is reserved: nothing is revoked.
	g.Update(*snap(func(s *Snapshot) { s.CgroupMemoryLimit = 2 * Gi }))
	if !g.Active(r) {
		t.Error("Update revoked a reservation")
	}
	v := g.Budgets()
	if v.Memory.Reserved != r.Contract().MemoryBytes || v.Memory.Free != 0 {
		t.Errorf("memory after shrink: %+v", v.Memory)
	}
	if d := g.Decide(est(nil)); d.Reason != ReasonInsufficientMemory {
		t.Errorf("decision after shrink = %v", d)
	}
	if err := g.Release(r); err != nil {
		t.Fatal(err)
	}
}

func TestHysteresis(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(epoch)
	g := New(Config{Hysteresis: 10 * time.Second}, WithClock(clk))
	high := snap(func(s *Snapshot) { s.Load1 = 9 })
	low := snap(func(s *Snapshot) { s.Load1 = 1 })
	g.Update(*high)
	if d := g.Decide(est(nil)); d.Reason != ReasonLoadHigh {
		t.Fatalf("high load: %v", d)
	}
	clk.SetTime(epoch.Add(5 * time.Second))
	g.Update(*low)
	clk.SetTime(epoch.Add(14 * time.Second)) // 9s below
	if d := g.Decide(est(nil)); d.Reason != ReasonLoadHigh {
		t.Fatalf("deferral ended after 9s below: %v", d)
	}
	g.Update(*high) // a spike restarts the count
	clk.SetTime(epoch.Add(15 * time.Second))
	g.Update(*low)
	clk.SetTime(epoch.Add(24 * time.Second))
	if d := g.Decide(est(nil)); d.Reason != ReasonLoadHigh {
		t.Fatalf("deferral ended 9s after the spike: %v", d)
	}
	clk.SetTime(epoch.Add(25 * time.Second))
	if d := g.Decide(est(nil)); d.Verdict != Admit {
		t.Fatalf("deferral did not end after 10s below: %v", d)
	}
	if g.Budgets().LoadDeferred {
		t.Error("Budgets still reports the deferral")
	}
}

func TestWorkMemoryUsageAvoidsDoubleCount(t *testing.T) {
	// doc.go's example.
	g := New(Config{MemoryReserved: Gi})
	g.Update(Snapshot{MemTotal: 16 * Gi, MemAvailable: 16 * Gi, CPUs: 8})
	if _, _, ok := g.Reserve(est(func(e *Estimate) { e.FixedMemory, e.PerItemMemory = 6*Gi, 0 })); !ok {
		t.Fatal("refused")
	}
	g.Update(Snapshot{MemTotal: 16 * Gi, MemAvailable: 9 * Gi, CPUs: 8})
	if got := g.Budgets().Memory.Free; got != 2*Gi {
		t.Errorf("free without WorkMemoryUsage = %s, want 2.0GiB", FormatBytes(got))
	}
	g.Update(Snapshot{MemTotal: 16 * Gi, MemAvailable: 9 * Gi, CPUs: 8, WorkMemoryUsage: 5 * Gi})
	if got := g.Budgets().Memory.Free; got != 7*Gi {
		t.Errorf("free with WorkMemoryUsage = %s, want 7.0GiB", FormatBytes(got))
	}
	g.Update(Snapshot{MemTotal: 16 * Gi, MemAvailable: 16 * Gi, CPUs: 8, WorkMemoryUsage: 50 * Gi})
	if got := g.Budgets().Memory.Free; got != 9*Gi {
		t.Errorf("free bounded by capacity = %s, want 9.0GiB", FormatBytes(got))
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 4403 * Mi / 1024 * 1024 / 1024 * 1024: "4.3GiB",
		Gi - 1: "1.0GiB", -2 * Mi: "-2.0MiB", math.MaxInt64: "more than 8.0EiB", 1 << 60: "1.0EiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestCPUPressureForgetsTheGovernorsOwnWork: CPU pressure observed while
// the governor's reservations fill every usable CPU does not defer the next
// admission (the batch that ends is the cause); pressure with CPUs free
// does, as soon as a second of it is seen.
func TestCPUPressureForgetsTheGovernorsOwnWork(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(epoch)
	g := New(Config{Hysteresis: 10 * time.Second}, WithClock(clk))
	total := uint64(1 << 30) // a kernel that has run for a while
	avg10 := 5.0             // the first snapshot has only avg10 to go by
	at := func(d time.Duration, stalled time.Duration) {
		clk.SetTime(clk.Now().Add(d))
		total += uint64(stalled.Microseconds())
		g.Update(*snap(func(s *Snapshot) {
			s.CPUs = 2
			s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: avg10, SomeTotal: total}}
		}))
	}
	at(0, 0)
	_, r, ok := g.Reserve(est(func(e *Estimate) { e.Threads, e.MinThreads = 2, 2 }))
	if !ok {
		t.Fatal("the first batch was refused")
	}
	// Our two threads and someone else's: 90% stalled for 5 s.
	avg10 = 95
	for range 25 {
		at(200*time.Millisecond, 180*time.Millisecond)
	}
	if err := g.Release(r); err != nil {
		t.Fatal(err)
	}
	at(200*time.Millisecond, 180*time.Millisecond) // the snapshot after the batch ended
	if d := g.Decide(est(nil)); d.Verdict != Admit {
		t.Fatalf("the next batch after our own: %v (avg10 would say 95%%)", d)
	}
	// Foreign work alone, CPUs free: a second at 80% defers (the window
	// spans 1.2 s: the 180 ms of the snapshot after the release, then
	// 5 × 160 ms).
	for range 5 {
		at(200*time.Millisecond, 160*time.Millisecond)
	}
	d := g.Decide(est(nil))
	if d.Reason != ReasonCPUPressure || !strings.HasPrefix(d.Message(), "CPU busy: 82% of the time, runnable tasks waited for a CPU (PSI), above the threshold 60%") {
		t.Fatalf("foreign pressure: %v %q", d, d.Message())
	}
	if v := g.Budgets(); !v.CPUByPSI || !v.LoadDeferred {
		t.Errorf("budgets: CPUByPSI %v, deferred %v", v.CPUByPSI, v.LoadDeferred)
	}
	// It ends 10 s after the pressure fell.
	for range 55 {
		at(200*time.Millisecond, 0)
	}
	if d := g.Decide(est(nil)); d.Verdict != Admit {
		t.Fatalf("after 11 s without pressure: %v", d)
	}
	// A governor's first snapshot has only avg10 to go by.
	fresh := New(Config{}, WithClock(clk))
	fresh.Update(*snap(func(s *Snapshot) { s.PSI = PSI{Available: true, CPU: Pressure{SomeAvg10: 95, SomeTotal: total}} }))
	if d := fresh.Decide(est(nil)); d.Reason != ReasonCPUPressure {
		t.Fatalf("first snapshot at avg10 95%%: %v", d)
	}
}

func TestMemory(t *testing.T) {
	g := New(Config{MemoryReserved: Gi})
	if grant, free := g.Memory(); grant != 0 || free != 0 {
		t.Fatalf("before a snapshot: %d, %d", grant, free)
	}
	g.Update(*snap(nil))
	if _, _, ok := g.Reserve(est(func(e *Estimate) { e.FixedMemory, e.PerItemMemory, e.BatchMax = 2*Gi, 0, 1 })); !ok {
		t.Fatal("reserve refused")
	}
	grant, free := g.Memory()
	if grant != 7*Gi || free != 5*Gi {
		t.Fatalf("8Gi, margin 1Gi, 2Gi reserved: grantable %d, free %d; want 7Gi and 5Gi", grant/Mi, free/Mi)
	}
	_ = g.Close()
	if grant, free := g.Memory(); grant != 0 || free != 0 {
		t.Fatalf("after Close: %d, %d", grant, free)
	}
}
