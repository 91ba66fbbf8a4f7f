package governor

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"pgregory.net/rapid"
)

// genEstimate draws estimates, mostly valid, sometimes huge or GPU-bound.
func genEstimate(t *rapid.T) Estimate {
	fixed := rapid.Int64Range(0, 2*Gi)
	mem := rapid.OneOf(fixed, fixed, fixed, rapid.Int64Range(0, 1<<62))
	small := rapid.Int64Range(0, 64*Mi)
	minB := rapid.Int64Range(1, 50).Draw(t, "batchMin")
	threads := rapid.IntRange(1, 4).Draw(t, "threads")
	e := Estimate{
		FixedMemory:     mem.Draw(t, "fixed"),
		PerItemMemory:   small.Draw(t, "perItem"),
		PerThreadMemory: small.Draw(t, "perThread"),
		BatchMin:        minB,
		BatchMax:        minB + rapid.Int64Range(0, 1000).Draw(t, "batchSpan"),
		Threads:         threads,
		MinThreads:      rapid.SampledFrom([]int{1, 1, 1, threads}).Draw(t, "minThreads"),
		IOSlots:         rapid.SampledFrom([]int{0, 0, 1, 2}).Draw(t, "io"),
	}
	if rapid.IntRange(0, 3).Draw(t, "gpu") == 0 {
		e.FixedGPUMemory = small.Draw(t, "gpuFixed")
		e.PerItemGPUMemory = rapid.Int64Range(0, 64*Mi).Draw(t, "gpuPerItem")
		e.GPUSlots = rapid.IntRange(0, 2).Draw(t, "gpuSlots")
	}
	if rapid.IntRange(0, 3).Draw(t, "scratch") == 0 {
		e.ScratchBytes = rapid.Int64Range(1, 50*Gi).Draw(t, "scratchBytes")
	}
	return e
}

func genSnapshot(t *rapid.T) Snapshot {
	total := rapid.Int64Range(4*Gi, 64*Gi).Draw(t, "memTotal")
	cpus := rapid.IntRange(1, 16).Draw(t, "cpus") + 3
	s := Snapshot{
		MemTotal:        total,
		MemAvailable:    rapid.Int64Range(0, total).Draw(t, "memAvailable"),
		CPUs:            cpus,
		Load1:           rapid.Float64Range(0, 1.7*float64(cpus)).Draw(t, "load1"),
		WorkMemoryUsage: rapid.Int64Range(0, total).Draw(t, "work"),
		SwapTotal:       rapid.Int64Range(0, 64*Gi).Draw(t, "swap"),
	}
	if rapid.Bool().Draw(t, "cgroup") {
		s.CgroupMemoryLimit = rapid.Int64Range(512*Mi, total).Draw(t, "cgroupLimit")
	}
	if rapid.Bool().Draw(t, "psi") {
		s.PSI = PSI{Available: true, IO: Pressure{SomeAvg10: rapid.Float64Range(0, 100).Draw(t, "psiIO")}}
	}
	for i := range rapid.IntRange(0, 2).Draw(t, "gpus") {
		g := GPU{ID: string(rune('a' + i)), Known: rapid.Bool().Draw(t, "known"), Unified: rapid.Bool().Draw(t, "unified")}
		g.TotalBytes = rapid.Int64Range(0, 16*Gi).Draw(t, "gpuTotal")
		g.FreeBytes = rapid.Int64Range(0, g.TotalBytes).Draw(t, "gpuFree")
		s.GPUs = append(s.GPUs, g)
	}
	for i := range rapid.IntRange(0, 2).Draw(t, "volumes") {
		s.Scratch = append(s.Scratch, ScratchVolume{
			Path: "/v" + string(rune('0'+i)), FreeBytes: rapid.Int64Range(0, 100*Gi).Draw(t, "volFree"),
			Rotational: rapid.Bool().Draw(t, "rot"),
		})
	}
	return s
}

// checkNotOverCommitted asserts that a grant left every budget its contract
// uses within its capacity. (Budgets it does not use may be over-committed
// after a snapshot shrank them: reservations are never revoked.)
func checkNotOverCommitted(t *rapid.T, g *Governor, c Contract) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lockedMemFree() < 0 || g.mu.memReserved > g.mu.memCapacity-g.mu.memMargin {
		t.Fatalf("memory over-committed: reserved %d, capacity %d, margin %d, free %d",
			g.mu.memReserved, g.mu.memCapacity, g.mu.memMargin, g.lockedMemFree())
	}
	if g.mu.threadsReserved > g.mu.cpus-g.mu.cpusReserved {
		t.Fatalf("threads over-committed: %d of %d", g.mu.threadsReserved, g.mu.cpus-g.mu.cpusReserved)
	}
	if c.IOSlots > 0 && g.mu.ioReserved > g.cfg.IOSlots {
		t.Fatalf("IO slots over-committed: %d/%d", g.mu.ioReserved, g.cfg.IOSlots)
	}
	if c.GPUSlots > 0 && g.mu.gpuSlotsReserved > g.mu.gpuSlots {
		t.Fatalf("GPU slots over-committed: %d/%d", g.mu.gpuSlotsReserved, g.mu.gpuSlots)
	}
	for i := range g.mu.gpus {
		if x := &g.mu.gpus[i]; x.id == c.GPUID && c.GPUMemoryBytes > 0 && g.lockedGPUFree(i) < 0 {
			t.Fatalf("GPU %s over-committed: %+v", x.id, *x)
		}
	}
	for _, v := range g.mu.scratch {
		if c.ScratchBytes > 0 && len(c.ScratchDir) > len(v.path) && c.ScratchDir[:len(v.path)] == v.path && v.reserved > v.free {
			t.Fatalf("scratch %s over-committed: %+v", v.path, v)
		}
	}
}

// TestPropertyBudgets drives a governor with random snapshots, estimates,
// releases and clock ticks. Invariants: a grant never over-commits any
// budget; contracts stay within [min, max] and [minThreads, threads] and
// cost exactly what the estimate says; a reduced batch is the largest that
// fits; the running totals equal the sum of the active contracts; a double
// release fails and changes no counter; after releasing everything every
// counter is exactly zero.
func TestPropertyBudgets(t *testing.T) {
	var granted, unified, reduced atomic.Int64
	defer func() {
		t.Logf("grants %d, unified %d, reduced %d", granted.Load(), unified.Load(), reduced.Load())
		if granted.Load() == 0 || unified.Load() == 0 || reduced.Load() == 0 {
			t.Errorf("the generators never exercised grants (%d), unified GPUs (%d) or reduced batches (%d)",
				granted.Load(), unified.Load(), reduced.Load())
		}
	}()
	rapid.Check(t, func(t *rapid.T) {
		clk := clocktesting.NewFakePassiveClock(epoch)
		cfg := Config{
			MemoryReserved: rapid.Int64Range(-1, 2*Gi).Draw(t, "margin"),
			CPUsReserved:   rapid.IntRange(-1, 2).Draw(t, "cpusReserved"),
			IOSlots:        rapid.SampledFrom([]int{-1, 0, 0, 1, 3}).Draw(t, "ioSlots"),
			GPUSlots:       rapid.SampledFrom([]int{-1, 0, 0, 1, 3}).Draw(t, "gpuSlots"),
		}
		g := New(cfg, WithClock(clk))
		type held struct {
			r Reservation
			e Estimate
		}
		var active []held
		var released []Reservation
		g.Update(genSnapshot(t))
		for range rapid.IntRange(20, 80).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "action") {
			case 0, 1:
				g.Update(genSnapshot(t))
			case 2:
				clk.SetTime(clk.Now().Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "tick")) * time.Second))
			case 3, 4:
				if len(active) == 0 {
					continue
				}
				i := rapid.IntRange(0, len(active)-1).Draw(t, "release")
				if err := g.Release(active[i].r); err != nil {
					t.Fatalf("Release: %v", err)
				}
				released = append(released, active[i].r)
				active = append(active[:i], active[i+1:]...)
			case 5:
				if len(released) == 0 {
					continue
				}
				before := g.Budgets()
				r := released[rapid.IntRange(0, len(released)-1).Draw(t, "double")]
				if err := g.Release(r); !errors.Is(err, ErrAlreadyReleased) {
					t.Fatalf("double Release = %v", err)
				}
				if after := g.Budgets(); !sameCounters(before, after) {
					t.Fatalf("double release changed counters: %+v -> %+v", before, after)
				}
			default:
				e := genEstimate(t)
				orig := e
				g.mu.Lock()
				memFree := g.lockedMemFree()
				g.mu.Unlock()
				d, r, ok := g.Reserve(e)
				if e != orig {
					t.Fatal("Reserve modified the estimate")
				}
				if !ok {
					continue
				}
				c := r.Contract()
				if c.Batch < e.BatchMin || c.Batch > e.BatchMax || c.Threads < max(e.MinThreads, 1) || c.Threads > e.Threads {
					t.Fatalf("contract %+v out of bounds for %+v", c, e)
				}
				if (d.Verdict == Admit) != (c.Batch == e.BatchMax && c.Threads == e.Threads) {
					t.Fatalf("verdict %s for contract %+v of %+v", d.Verdict, c, e)
				}
				fixed, perItem := e.FixedMemory, e.PerItemMemory
				if c.GPUID != "" && c.GPUMemoryBytes == 0 && (e.FixedGPUMemory > 0 || e.PerItemGPUMemory > 0) {
					fixed, perItem = fixed+e.FixedGPUMemory, perItem+e.PerItemGPUMemory // unified
					unified.Add(1)
				}
				if want, _ := needAt(fixed, perItem, e.PerThreadMemory, c.Batch, c.Threads); c.MemoryBytes != want {
					t.Fatalf("contract memory %d, want %d", c.MemoryBytes, want)
				}
				if d.Verdict == ReduceBatch {
					reduced.Add(1)
				}
				if !e.NeedsGPU() && c.Batch < e.BatchMax {
					if next, ok := needAt(fixed, perItem, e.PerThreadMemory, c.Batch+1, c.Threads); ok && next <= memFree {
						t.Fatalf("batch %d is not the largest: %d fits in %d", c.Batch, next, memFree)
					}
				}
				active = append(active, held{r, e})
				checkNotOverCommitted(t, g, c)
				granted.Add(1)
			}
			// Running totals equal the sum of the active contracts.
			var mem int64
			var threads, io, gs int
			for _, h := range active {
				c := h.r.Contract()
				mem += c.MemoryBytes
				threads, io, gs = threads+c.Threads, io+c.IOSlots, gs+c.GPUSlots
			}
			v := g.Budgets()
			if v.Memory.Reserved != mem || v.CPU.Reserved != int64(threads) || v.IOSlots.Reserved != int64(io) ||
				v.GPUSlots.Reserved != int64(gs) || v.Reservations != len(active) {
				t.Fatalf("totals %+v do not match contracts: mem %d threads %d io %d gpu %d n %d", v, mem, threads, io, gs, len(active))
			}
		}
		for _, h := range active {
			if err := g.Release(h.r); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.mu.memReserved != 0 || g.mu.threadsReserved != 0 || g.mu.ioReserved != 0 || g.mu.gpuSlotsReserved != 0 || g.mu.active != 0 {
			t.Fatalf("counters not zero after releasing everything")
		}
		for _, x := range g.mu.gpus {
			if x.reserved != 0 || x.refs != 0 {
				t.Fatalf("GPU %s not zero: %+v", x.id, x)
			}
		}
		for _, x := range g.mu.scratch {
			if x.reserved != 0 || x.refs != 0 {
				t.Fatalf("volume %s not zero: %+v", x.path, x)
			}
		}
	})
}

func sameCounters(a, b BudgetsView) bool {
	if a.Memory != b.Memory || a.CPU != b.CPU || a.IOSlots != b.IOSlots || a.GPUSlots != b.GPUSlots ||
		a.Reservations != b.Reservations || len(a.GPUs) != len(b.GPUs) || len(a.Scratch) != len(b.Scratch) {
		return false
	}
	for i := range a.GPUs {
		if a.GPUs[i] != b.GPUs[i] {
			return false
		}
	}
	for i := range a.Scratch {
		if a.Scratch[i] != b.Scratch[i] {
			return false
		}
	}
	return true
}

// TestConcurrentReserveRelease has 64 goroutines deciding, reserving and
// releasing at once while snapshots keep arriving. Each goroutine adds its
// contract to shared sums after the grant and subtracts it before the
// release, so the sums never exceed what the governor holds: they must never
// exceed the budgets, at any moment.
func TestConcurrentReserveRelease(t *testing.T) {
	const capacity, cpus = 8 * Gi, 8
	g := New(Config{MemoryReserved: Gi, CPUsReserved: -1, IOSlots: 3})
	base := Snapshot{MemTotal: capacity, MemAvailable: capacity, CPUs: cpus,
		Scratch: []ScratchVolume{{Path: "/s", FreeBytes: 10 * Gi}}}
	g.Update(base)
	var mem, threads, io, scratch atomic.Int64
	var grants atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() { // snapshots keep arriving, with load and dynamic values only
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s := base
			s.MemAvailable = capacity - int64(i%4)*Mi
			g.Update(s)
			_ = g.Budgets()
		}
	}()
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var held []Reservation
			// release subtracts from the sums before the governor frees.
			release := func(r Reservation) {
				c := r.Contract()
				mem.Add(-c.MemoryBytes)
				threads.Add(-int64(c.Threads))
				io.Add(-int64(c.IOSlots))
				scratch.Add(-c.ScratchBytes)
				if err := g.Release(r); err != nil {
					t.Errorf("Release: %v", err)
				}
				if err := g.Release(r); !errors.Is(err, ErrAlreadyReleased) {
					t.Errorf("double Release = %v", err)
				}
			}
			for range 300 {
				e := Estimate{
					FixedMemory: rng.Int64N(2 * Gi), PerItemMemory: rng.Int64N(64 * Mi), PerThreadMemory: rng.Int64N(128 * Mi),
					BatchMin: 1, BatchMax: 1 + rng.Int64N(64), Threads: 1 + rng.IntN(4), MinThreads: 1, IOSlots: rng.IntN(2),
				}
				if rng.IntN(4) == 0 {
					e.ScratchBytes = rng.Int64N(3 * Gi)
				}
				_ = g.Decide(e)
				if len(held) == 3 || (len(held) > 0 && rng.IntN(2) == 0) {
					i := rng.IntN(len(held))
					release(held[i])
					held = append(held[:i], held[i+1:]...)
				}
				_, r, ok := g.Reserve(e)
				if !ok {
					continue
				}
				grants.Add(1)
				c := r.Contract()
				if m := mem.Add(c.MemoryBytes); m > capacity-Gi {
					t.Errorf("memory over-committed: %d > %d", m, capacity-Gi)
				}
				if n := threads.Add(int64(c.Threads)); n > cpus {
					t.Errorf("threads over-committed: %d", n)
				}
				if n := io.Add(int64(c.IOSlots)); n > 3 {
					t.Errorf("IO slots over-committed: %d", n)
				}
				if n := scratch.Add(c.ScratchBytes); n > 10*Gi {
					t.Errorf("scratch over-committed: %d", n)
				}
				held = append(held, r)
			}
			for _, r := range held {
				release(r)
			}
		}()
	}
	wg.Wait()
	close(stop)
	v := g.Budgets()
	if v.Memory.Reserved != 0 || v.CPU.Reserved != 0 || v.IOSlots.Reserved != 0 || v.Reservations != 0 || v.Scratch[0].Bytes.Reserved != 0 {
		t.Errorf("budgets not back to zero: %+v", v)
	}
	if grants.Load() == 0 {
		t.Error("no reservation was ever granted")
	}
}
