package governor

import (
	"math/bits"
	"time"
)

// plan is what a fitting decision would reserve.
type plan struct {
	batch             int64
	threads           int
	memory, gpuMemory int64
	gpu, vol          int32 // registry indexes, -1 for none
	io, gpuSlots      int
	scratch           int64
	share             int
}

// mulAdd returns acc + a·n for non-negative operands, and false on overflow.
func mulAdd(acc, a, n int64) (int64, bool) {
	if acc < 0 || a < 0 || n < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(n))
	if hi != 0 || lo > maxBytes {
		return 0, false
	}
	s, carry := bits.Add64(uint64(acc), lo, 0)
	if carry != 0 || s > maxBytes {
		return 0, false
	}
	return int64(s), true
}

// add returns a + b for non-negative operands, and false on overflow.
func add(a, b int64) (int64, bool) { return mulAdd(a, b, 1) }

// Constant details of invalid estimates.
const (
	detailBatchMin   = "batch.min must be >= 1"
	detailBatchMax   = "batch.max must be >= batch.min"
	detailThreads    = "threads must be >= 1"
	detailMinThreads = "minThreads must be between 1 and threads"
	detailNegative   = "amounts and slots must not be negative"
	detailTooLarge   = "threads or slots exceed 2^31"
)

// validate returns the rule e breaks, or "".
func validate(e *Estimate) string {
	switch {
	case e.BatchMin < 1:
		return detailBatchMin
	case e.BatchMax < e.BatchMin:
		return detailBatchMax
	case e.Threads < 1:
		return detailThreads
	case e.MinThreads < 0 || e.MinThreads > e.Threads:
		return detailMinThreads
	case e.FixedMemory < 0 || e.PerItemMemory < 0 || e.PerThreadMemory < 0 ||
		e.FixedGPUMemory < 0 || e.PerItemGPUMemory < 0 || e.ScratchBytes < 0 ||
		e.IOSlots < 0 || e.GPUSlots < 0:
		return detailNegative
	case e.Threads > 1<<31-1 || e.IOSlots > 1<<31-1 || e.GPUSlots > 1<<31-1:
		return detailTooLarge
	}
	return ""
}

// shortage is why a candidate did not fit.
type shortage struct {
	reason           Reason
	budget           Budget
	need, free, marg int64
}

// lockedDecide computes the decision for e and, when it fits, the plan to
// reserve. The checks run in this order: closed, invalid estimate, no
// snapshot, demands that can never fit (Reject), deferrals (load, IO
// pressure), slots, scratch, CPU, then memory and GPU memory with the batch
// and threads computed directly by division.
// REQUIRES: g.mu held.
func (g *Governor) lockedDecide(e *Estimate, now time.Time) (Decision, plan) {
	minT := max(e.MinThreads, 1)
	d := Decision{
		Batch: e.BatchMin, Threads: minT, Reservations: g.mu.active,
		BatchRequested: e.BatchMax, ThreadsRequested: e.Threads, ItemsLeft: e.ItemsLeft,
	}
	p := plan{gpu: -1, vol: -1}
	wait := func(r Reason, b Budget, need, free, margin int64) (Decision, plan) {
		d.Verdict, d.Reason, d.Budget, d.Need, d.Free, d.Margin = Wait, r, b, need, free, margin
		return d, p
	}
	reject := func(r Reason, b Budget, need, free, margin int64) (Decision, plan) {
		d.Verdict, d.Reason, d.Budget, d.Need, d.Free, d.Margin = Reject, r, b, need, free, margin
		return d, p
	}
	if g.mu.closed {
		return wait(ReasonClosed, BudgetNone, 0, 0, 0)
	}
	if detail := validate(e); detail != "" {
		d.Detail = detail
		return reject(ReasonInvalidEstimate, BudgetNone, 0, 0, 0)
	}
	if !g.mu.haveSnap || g.mu.memCapacity <= 0 {
		return wait(ReasonNoSnapshot, BudgetNone, 0, 0, 0)
	}

	// Never fits, even with no reservation at all.
	threadsCap := g.mu.cpus - g.mu.cpusReserved
	if minT > threadsCap {
		return reject(ReasonExceedsCapacity, BudgetCPU, int64(minT), int64(threadsCap), int64(g.mu.cpusReserved))
	}
	if e.IOSlots > g.cfg.IOSlots {
		return reject(ReasonExceedsCapacity, BudgetIOSlots, int64(e.IOSlots), int64(g.cfg.IOSlots), 0)
	}
	memCap := g.mu.memCapacity - g.mu.memMargin
	ramMin, ok := needAt(e.FixedMemory, e.PerItemMemory, e.PerThreadMemory, e.BatchMin, minT)
	if !ok || ramMin > memCap {
		if !ok {
			ramMin = maxBytes
		}
		return reject(ReasonExceedsCapacity, BudgetMemory, ramMin, memCap, g.mu.memMargin)
	}
	needGPU := e.NeedsGPU()
	gpuSlots := e.GPUSlots
	if needGPU {
		gpuSlots = max(gpuSlots, 1)
		present, unknown, possible := 0, 0, 0
		short := shortage{need: -1}
		for i := range g.mu.gpus {
			x := &g.mu.gpus[i]
			if !x.present {
				continue
			}
			present++
			switch {
			case x.unified:
				n, ok := unifiedNeedAt(e, e.BatchMin, minT)
				if ok && n <= memCap {
					possible++
				} else if short.need < 0 {
					if !ok {
						n = maxBytes
					}
					short = shortage{budget: BudgetMemory, need: n, free: memCap, marg: g.mu.memMargin}
				}
			case !x.known:
				unknown++
			default:
				n, ok := mulAdd(e.FixedGPUMemory, e.PerItemGPUMemory, e.BatchMin)
				c := x.total - x.margin
				if ok && n <= c {
					possible++
				} else if short.need < 0 || c > short.free {
					if !ok {
						n = maxBytes
					}
					short = shortage{budget: BudgetGPUMemory, need: n, free: c, marg: x.margin}
				}
			}
		}
		if present == 0 {
			return reject(ReasonNoGPU, BudgetGPUMemory, 0, 0, 0)
		}
		if gpuSlots > g.mu.gpuSlots {
			return reject(ReasonExceedsCapacity, BudgetGPUSlots, int64(gpuSlots), int64(g.mu.gpuSlots), 0)
		}
		if possible == 0 && unknown == 0 {
			return reject(ReasonExceedsCapacity, short.budget, short.need, short.free, short.marg)
		}
	}
	if e.ScratchBytes > 0 {
		present := false
		for i := range g.mu.scratch {
			present = present || g.mu.scratch[i].present
		}
		if !present {
			return reject(ReasonNoScratch, BudgetScratch, e.ScratchBytes, 0, 0)
		}
	}

	// Deferrals: new admissions only (never a task's next batch:
	// Estimate.Continues), with hysteresis; the CPU gate's wait is bounded
	// while no reservation is active.
	if !e.Continues && g.mu.load.check(now, g.cfg.Hysteresis) && !g.lockedCPUGateWaited(now) {
		d.Signal, d.Threshold, d.MaxWait = g.mu.load.value, g.mu.load.threshold, g.cfg.CPUGateMaxWait
		d.Hysteresis, d.BelowSince = g.cfg.Hysteresis, g.mu.load.belowSince
		d.GateUntil = g.lockedGateUntil()
		if g.mu.loadByPSI {
			return wait(ReasonCPUPressure, BudgetCPUPSI, 0, 0, 0)
		}
		return wait(ReasonLoadHigh, BudgetLoad, 0, 0, 0)
	}
	if g.lockedPressureDeferred(now) {
		ps := &g.mu.pressure.state
		d.Threshold, d.MaxWait = float64(ps.Soft), g.cfg.Hysteresis
		return wait(ReasonMemoryPressure, BudgetMemoryPressure, ps.Outside, ps.Available, 0)
	}
	if ioDeferred := g.mu.io.check(now, g.cfg.Hysteresis); !e.Continues && ioDeferred && e.IOSlots > 0 {
		d.Signal, d.Threshold = g.mu.io.value, g.mu.io.threshold
		d.Hysteresis, d.BelowSince = g.cfg.Hysteresis, g.mu.io.belowSince
		return wait(ReasonIOPressure, BudgetIOPSI, 0, 0, 0)
	}

	// Slots and scratch.
	if free := g.cfg.IOSlots - g.mu.ioReserved; e.IOSlots > free {
		return wait(ReasonNoIOSlot, BudgetIOSlots, int64(e.IOSlots), int64(free), 0)
	}
	if needGPU {
		if free := g.mu.gpuSlots - g.mu.gpuSlotsReserved; gpuSlots > free {
			return wait(ReasonNoGPUSlot, BudgetGPUSlots, int64(gpuSlots), int64(max(free, 0)), 0)
		}
	}
	if e.ScratchBytes > 0 {
		best, bestFree, unknown := int32(-1), int64(-1), false
		for i := range g.mu.scratch {
			v := &g.mu.scratch[i]
			if !v.present {
				continue
			}
			if !v.known {
				unknown = true
				continue
			}
			free := v.free - v.reserved
			if best < 0 || scratchBetter(free, v.rotational, bestFree, g.mu.scratch[best].rotational, e.ScratchBytes) {
				best, bestFree = int32(i), free
			}
		}
		if bestFree < e.ScratchBytes {
			if unknown {
				// The unmeasurable volume may have room: wait for its measure.
				return wait(ReasonScratchUnknown, BudgetScratch, e.ScratchBytes, max(bestFree, 0), 0)
			}
			return wait(ReasonNoScratch, BudgetScratch, e.ScratchBytes, max(bestFree, 0), 0)
		}
		p.vol, p.scratch = best, e.ScratchBytes
	}

	// CPU.
	freeThreads := threadsCap - g.mu.threadsReserved
	if freeThreads < minT {
		return wait(ReasonNoFreeCPU, BudgetCPU, int64(minT), int64(max(freeThreads, 0)), int64(g.mu.cpusReserved))
	}
	tcap := min(e.Threads, freeThreads)

	// Memory, GPU memory, batch and threads.
	memFree := g.lockedMemFree()
	var f fitted
	if !needGPU {
		f = fit(e, minT, tcap, memFree, false, false, 0)
		if n, k := shareCap(e, minT, memCap, threadsCap); k > 0 && f.short.reason == "" && f.batch > evenBatch(n, e.BatchMin, e.ItemsLeft) {
			held := *e
			held.BatchMax = n
			f = fit(&held, minT, tcap, memFree, false, false, 0)
			p.share = k
		}
	} else {
		f.short = shortage{reason: ReasonGPUUnknown, budget: BudgetGPUMemory}
		found := false
		for i := range g.mu.gpus {
			x := &g.mu.gpus[i]
			if !x.present || (!x.known && !x.unified) {
				continue
			}
			var c fitted
			if x.unified {
				c = fit(e, minT, tcap, memFree, true, false, 0)
			} else {
				n, ok := mulAdd(e.FixedGPUMemory, e.PerItemGPUMemory, e.BatchMin)
				if !ok || n > x.total-x.margin {
					continue // can never fit this GPU
				}
				c = fit(e, minT, tcap, memFree, false, true, g.lockedGPUFree(i))
				if c.short.budget == BudgetGPUMemory {
					c.short.marg = x.margin
				}
			}
			c.gpu = int32(i)
			switch {
			case c.short.reason == "" && (!found || c.batch > f.batch || (c.batch == f.batch && c.threads > f.threads)):
				f, found = c, true
			case c.short.reason != "" && !found && f.short.reason == ReasonGPUUnknown:
				f = c
			}
		}
	}
	if f.short.reason != "" {
		s := f.short
		if s.budget == BudgetMemory {
			s.marg = g.mu.memMargin
		}
		d.Need, d.Free, d.Margin = s.need, max(s.free, 0), s.marg
		d.Verdict, d.Reason, d.Budget = Wait, s.reason, s.budget
		return d, p
	}
	p.batch, p.threads, p.memory, p.gpuMemory, p.gpu = f.batch, f.threads, f.memory, f.gpuMemory, f.gpu
	p.io = e.IOSlots
	if needGPU {
		p.gpuSlots = gpuSlots
	}
	d.Batch, d.Threads, d.Share = f.batch, f.threads, p.share
	d.Need, d.Free, d.Margin = f.memory, max(memFree, 0), g.mu.memMargin
	if f.batch == evenBatch(e.BatchMax, e.BatchMin, e.ItemsLeft) && f.threads == e.Threads {
		d.Verdict, d.Reason = Admit, ReasonFits
	} else {
		d.Verdict, d.Reason = ReduceBatch, ReasonBatchReduced
	}
	return d, p
}

// needAt is fixed + perItem·n + perThread·t, overflow-checked.
func needAt(fixed, perItem, perThread, n int64, t int) (int64, bool) {
	v, ok := mulAdd(fixed, perItem, n)
	if !ok {
		return 0, false
	}
	return mulAdd(v, perThread, int64(t))
}

// unifiedNeedAt is the RAM need of e on a unified-memory GPU.
func unifiedNeedAt(e *Estimate, n int64, t int) (int64, bool) {
	fixed, ok1 := add(e.FixedMemory, e.FixedGPUMemory)
	perItem, ok2 := add(e.PerItemMemory, e.PerItemGPUMemory)
	if !ok1 || !ok2 {
		return 0, false
	}
	return needAt(fixed, perItem, e.PerThreadMemory, n, t)
}

// fitted is the outcome of fit for one candidate.
type fitted struct {
	batch             int64
	threads           int
	memory, gpuMemory int64
	gpu               int32
	short             shortage
}

// fit computes the largest batch in [min, max] and the most threads in
// [minT, tcap] such that the RAM need fixed + perItem·n + perThread·t fits
// memFree and, on a dedicated GPU, fixedGPU + perItemGPU·n fits gpuFree.
// Threads come first: they are reduced only when even the smallest batch
// does not fit. On a unified GPU the GPU costs join the RAM costs.
func fit(e *Estimate, minT, tcap int, memFree int64, unified, dedicated bool, gpuFree int64) fitted {
	f := fitted{gpu: -1}
	fixed, perItem := e.FixedMemory, e.PerItemMemory
	if unified {
		var ok1, ok2 bool
		fixed, ok1 = add(fixed, e.FixedGPUMemory)
		perItem, ok2 = add(perItem, e.PerItemGPUMemory)
		if !ok1 || !ok2 {
			f.short = shortage{reason: ReasonInsufficientMemory, budget: BudgetMemory, need: maxBytes, free: memFree}
			return f
		}
	}
	needMin, ok := needAt(fixed, perItem, e.PerThreadMemory, e.BatchMin, minT)
	if !ok {
		needMin = maxBytes
	}
	if !ok || needMin > memFree {
		f.short = shortage{reason: ReasonInsufficientMemory, budget: BudgetMemory, need: needMin, free: memFree}
		return f
	}
	if dedicated {
		g, ok := mulAdd(e.FixedGPUMemory, e.PerItemGPUMemory, e.BatchMin)
		if !ok {
			g = maxBytes
		}
		if !ok || g > gpuFree {
			f.short = shortage{reason: ReasonInsufficientGPUMemory, budget: BudgetGPUMemory, need: g, free: gpuFree}
			return f
		}
	}
	// Threads: as many as wished and free, then as many as memory allows
	// at the smallest batch.
	t := tcap
	if e.PerThreadMemory > 0 {
		extra := (memFree - needMin) / e.PerThreadMemory
		if extra < int64(t-minT) {
			t = minT + int(extra)
		}
	}
	// Batch: what is left after the fixed and per-thread costs, by division.
	used, _ := mulAdd(fixed, e.PerThreadMemory, int64(t)) // <= memFree: no overflow
	n := e.BatchMax
	if perItem > 0 {
		n = min(n, (memFree-used)/perItem)
	}
	if dedicated && e.PerItemGPUMemory > 0 {
		n = min(n, (gpuFree-e.FixedGPUMemory)/e.PerItemGPUMemory)
	}
	n = evenBatch(n, e.BatchMin, e.ItemsLeft)
	f.batch, f.threads = n, t
	f.memory, _ = mulAdd(used, perItem, n)
	if dedicated {
		f.gpuMemory, _ = mulAdd(e.FixedGPUMemory, e.PerItemGPUMemory, n)
	}
	return f
}

// shareCap returns the largest batch of e that fits a 1/k share of memCap,
// the grantable memory, and k, when k = min(e.Peers, slots/minT) batches
// could run side by side, the batch e asks (evened out) needs more than
// the share, the share holds e's smallest batch, and e's learned duration
// does not make k shared batches end the work later than full ones (see
// Estimate.Peers). Otherwise it returns (0, 0).
func shareCap(e *Estimate, minT int, memCap int64, slots int) (n int64, k int) {
	k = min(e.Peers, slots/max(minT, 1))
	if k < 2 || e.PerItemMemory <= 0 || memCap <= 0 {
		return 0, 0
	}
	share := memCap / int64(k)
	full := evenBatch(e.BatchMax, e.BatchMin, e.ItemsLeft)
	fullNeed, ok := needAt(e.FixedMemory, e.PerItemMemory, e.PerThreadMemory, full, minT)
	if !ok || fullNeed <= share {
		return 0, 0
	}
	used, _ := needAt(e.FixedMemory, 0, e.PerThreadMemory, 0, minT) // <= fullNeed
	if used >= share {
		return 0, 0
	}
	n = (share - used) / e.PerItemMemory
	if n < max(e.BatchMin, 1) {
		return 0, 0
	}
	if !sharedSooner(e, evenBatch(n, e.BatchMin, e.ItemsLeft), full, k, float64(memCap)/float64(fullNeed)) {
		return 0, 0
	}
	return n, k
}

// sharedSooner reports whether k batches of shared items side by side
// process items at least as fast as the full batches memory holds
// (fullAtOnce of them, a fraction counted as such: the greedy side's best
// case), by the learned duration BatchTime + ItemTime·n. With no duration
// known the items' time is taken as all per item: k batches win.
func sharedSooner(e *Estimate, shared, full int64, k int, fullAtOnce float64) bool {
	a, b := e.BatchTime.Seconds(), e.ItemTime.Seconds()
	if a <= 0 || b < 0 {
		return true
	}
	rate := func(n int64, at float64) float64 { return at * float64(n) / (a + b*float64(n)) }
	return rate(shared, float64(k)) >= rate(full, fullAtOnce)
}

// evenBatch is the batch, at most n items and at least min, that runs
// left items in as many batches as n does, of sizes as equal as can be:
// a tail (62 + 2) pays a batch's fixed costs for a few items, holds the
// memory of the large batch meanwhile, and ends the task later than two
// even halves run side by side. left <= n, or left unknown (0): n.
func evenBatch(n, min, left int64) int64 {
	if n < 1 || left <= n {
		return n
	}
	batches := (left + n - 1) / n
	return max((left+batches-1)/batches, min)
}

// scratchBetter orders scratch volumes: those where the lease fits first,
// then solid-state ones, then the most free bytes.
func scratchBetter(free int64, rotational bool, bestFree int64, bestRotational bool, need int64) bool {
	if fits, bestFits := free >= need, bestFree >= need; fits != bestFits {
		return fits
	}
	if rotational != bestRotational {
		return !rotational
	}
	return free > bestFree
}
