package governor

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// Memory pressure from outside the batches (issue 57). The governor is
// handed, in each snapshot, the machine's available memory and the
// batches' measured usage (WorkMemoryUsage); what the machine uses beyond
// the batches is the other programs'. It never reads /proc: it judges the
// numbers it is handed, and the caller acts on its judgement (Pressure).

// ReasonMemoryPressure: the available memory fell under the soft
// threshold; new admissions wait until it has stayed above it for
// Config.Hysteresis.
const ReasonMemoryPressure Reason = "MemoryPressure"

// BudgetMemoryPressure is the budget of ReasonMemoryPressure: Need is the
// memory the other programs use, Free the memory available.
const BudgetMemoryPressure Budget = "memoryPressure"

// PressureLevel is how hard the memory is pressed.
type PressureLevel int

// The levels.
const (
	// PressureNone: the available memory is above the soft threshold.
	PressureNone PressureLevel = iota
	// PressureSoft: under the soft threshold; no new admission.
	PressureSoft
	// PressureHard: under the hard threshold, or swap falling faster than
	// Config.SwapFallRate; one batch must yield (the caller evicts).
	PressureHard
)

// String returns none, soft or hard.
func (l PressureLevel) String() string {
	switch l {
	case PressureSoft:
		return "soft"
	case PressureHard:
		return "hard"
	}
	return "none"
}

// MemoryPressure is the governor's judgement of the last snapshot.
type MemoryPressure struct {
	// Level of the last snapshot (Soft also while the soft deferral's
	// hysteresis runs).
	Level PressureLevel
	// Outside is the memory used by programs outside the batches:
	// capacity − available − the batches' measured usage (at least 0).
	Outside int64
	// Available is the memory available (MemAvailable bounded by the
	// cgroup); Batches the batches' measured usage.
	Available, Batches int64
	// Soft and Hard are the thresholds in force (0: off).
	Soft, Hard int64
	// SwapFalling is the rate at which swap and zram free fell over the
	// last second or more, in bytes per second (0: not falling).
	SwapFalling int64
	// SwapFallRate is the rate at which it is hard pressure (0: off).
	SwapFallRate int64
}

// Defaults of the pressure thresholds (Config.MemoryPressureSoft, _Hard,
// SwapFallRate).
const (
	// DefaultSwapFallRate is how fast swap and zram free may fall before
	// a batch yields: 64 MiB/s (a zram device filling that fast means
	// the RAM is already gone and reclaim has started on the user's
	// pages).
	DefaultSwapFallRate int64 = 64 << 20
)

// softThreshold is the available memory under which admissions wait: the
// system margin by default (max(512 MiB, 5 % of the capacity)). The
// governor never reserves into that margin, so with the batches within
// their contracts only programs outside them bring the available memory
// under it.
// REQUIRES: g.mu held.
func (g *Governor) lockedSoftThreshold() int64 {
	switch s := g.cfg.MemoryPressureSoft; {
	case s < 0:
		return 0
	case s > 0:
		return s
	}
	return g.mu.memMargin
}

// lockedHardThreshold is the available memory under which a batch
// yields: half the soft threshold by default (max(256 MiB, 2.5 %)). The
// kubelet's 100Mi suits a server; a user's program growing 512 MiB/s
// crosses 256 MiB in half a second, time for two probes and a kill.
// REQUIRES: g.mu held.
func (g *Governor) lockedHardThreshold() int64 {
	switch h := g.cfg.MemoryPressureHard; {
	case h < 0:
		return 0
	case h > 0:
		return h
	}
	return g.lockedSoftThreshold() / 2
}

// swapWindow measures how fast swap and zram free fall, over at least a
// second.
type swapWindow struct {
	have   bool
	baseAt time.Time
	base   int64
	rate   int64
}

func (w *swapWindow) observe(free int64, now time.Time) int64 {
	if !w.have || free > w.base {
		w.have, w.baseAt, w.base, w.rate = true, now, free, 0
		return 0
	}
	if dt := now.Sub(w.baseAt); dt >= time.Second {
		w.rate = int64(float64(w.base-free) / dt.Seconds())
		w.baseAt, w.base = now, free
	}
	return w.rate
}

// lockedObservePressure judges a new snapshot's memory.
// REQUIRES: g.mu held, g.mu.snap, memCapacity and memAvailable updated.
func (g *Governor) lockedObservePressure(now time.Time) {
	s := &g.mu.snap
	p := &g.mu.pressure
	soft, hard := g.lockedSoftThreshold(), g.lockedHardThreshold()
	batches := max(s.WorkMemoryUsage, 0)
	p.state = MemoryPressure{
		Available: g.mu.memAvailable, Batches: batches, Soft: soft, Hard: hard,
		Outside: max(g.mu.memCapacity-g.mu.memAvailable-batches, 0),
	}
	if g.cfg.SwapFallRate >= 0 && s.SwapTotal+s.ZramTotal > 0 {
		p.state.SwapFallRate = cmp.Or(g.cfg.SwapFallRate, DefaultSwapFallRate)
		p.state.SwapFalling = p.swap.observe(s.SwapFree+s.ZramFree, now)
	}
	// value > threshold ⇔ available < soft.
	p.soft.observe(float64(-g.mu.memAvailable), float64(-soft), soft > 0, now)
	switch {
	case hard > 0 && g.mu.memAvailable < hard,
		p.state.SwapFallRate > 0 && p.state.SwapFalling >= p.state.SwapFallRate:
		p.state.Level = PressureHard
	case p.soft.check(now, g.cfg.Hysteresis):
		p.state.Level = PressureSoft
	}
}

// Pressure returns the judgement of the last snapshot: the caller evicts
// one batch at PressureHard (ChooseVictim), and shows the outside usage.
func (g *Governor) Pressure() MemoryPressure {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.pressure.state
}

// lockedPressureDeferred reports whether memory pressure holds new
// admissions back now, with the hysteresis.
// REQUIRES: g.mu held.
func (g *Governor) lockedPressureDeferred(now time.Time) bool {
	return g.mu.pressure.state.Level == PressureHard || g.mu.pressure.soft.check(now, g.cfg.Hysteresis)
}

// pressureState is the governor's memory pressure bookkeeping.
type pressureState struct {
	state MemoryPressure
	soft  deferral
	swap  swapWindow
}

// appendPressure formats ReasonMemoryPressure's message.
func appendPressure(b []byte, d Decision) []byte {
	b = append(b, "memory pressure from outside the batches: "...)
	b = appendBytes(b, d.Need)
	b = append(b, " used by other programs, "...)
	b = appendBytes(b, d.Free)
	b = append(b, " free (admissions wait until more than "...)
	b = appendBytes(b, int64(d.Threshold))
	b = append(b, " is free for "...)
	b = append(b, d.MaxWait.String()...)
	return append(b, ')')
}

// VictimCandidate is a running batch that may be evicted.
type VictimCandidate struct {
	// Task and Batch name it (Batch: its index).
	Task  string
	Batch int64
	// Started is when it started; Threads it was granted.
	Started time.Time
	Threads int
	// Reserved is its contract's memory; Used its measured usage.
	Reserved, Used int64
}

// lostWork is what evicting c loses: its thread-seconds since it started
// (nothing of a running batch is committed).
func (c VictimCandidate) lostWork(now time.Time) float64 {
	return max(now.Sub(c.Started).Seconds(), 0) * float64(max(c.Threads, 1))
}

// ChooseVictim is the one rule that picks the batch to evict when memory
// runs short by deficit bytes (the hard threshold less what is
// available), among cands at now; -1 when there is none. In order:
//
//  1. a batch whose usage covers the deficit, when there is one: killing
//     a small one would not give the memory back, and the next would go
//     too;
//  2. the batch most over its reservation, when one is over it: it broke
//     its contract (the kubelet ranks pods over their request first);
//  3. the least lost work (thread-seconds since it started: nothing of a
//     running batch is committed), in steps of a minute, so that batches
//     started about together count as equal;
//  4. the youngest;
//  5. the largest usage, then the task's name and the batch's index, so
//     that the choice is the same whatever the order of cands.
func ChooseVictim(cands []VictimCandidate, deficit int64, now time.Time) int {
	if len(cands) == 0 {
		return -1
	}
	covers := func(c VictimCandidate) bool { return c.Used >= deficit }
	anyCovers := slices.ContainsFunc(cands, covers)
	over := func(c VictimCandidate) int64 { return max(c.Used-c.Reserved, 0) }
	best := 0
	for i := 1; i < len(cands); i++ {
		if victimLess(cands[i], cands[best], anyCovers, covers, over, now) {
			best = i
		}
	}
	return best
}

// victimLess reports whether a is a better victim than b.
func victimLess(a, b VictimCandidate, anyCovers bool, covers func(VictimCandidate) bool, over func(VictimCandidate) int64, now time.Time) bool {
	if anyCovers && covers(a) != covers(b) {
		return covers(a)
	}
	if oa, ob := over(a), over(b); oa != ob {
		return oa > ob
	}
	if la, lb := int64(a.lostWork(now)/60), int64(b.lostWork(now)/60); la != lb {
		return la < lb
	}
	if !a.Started.Equal(b.Started) {
		return a.Started.After(b.Started)
	}
	if a.Used != b.Used {
		return a.Used > b.Used
	}
	if a.Task != b.Task {
		return a.Task < b.Task
	}
	return a.Batch < b.Batch
}

// EvictionMessage is what an evicted task's condition says: the numbers
// of the pressure p and, when known, the largest programs outside the
// batches (top, already formatted by the caller: "python3 (pid 812)
// 4.1GiB").
func EvictionMessage(batch int64, p MemoryPressure, top []string) string {
	b := []byte("batch ")
	b = strconv.AppendInt(b, batch, 10)
	b = append(b, " yielded to memory pressure from outside the batches: "...)
	b = appendBytes(b, p.Outside)
	b = append(b, " used by other programs, "...)
	b = appendBytes(b, p.Available)
	b = append(b, " free"...)
	if p.SwapFallRate > 0 && p.SwapFalling >= p.SwapFallRate {
		b = append(b, ", swap falling "...)
		b = appendBytes(b, p.SwapFalling)
		b = append(b, "/s"...)
	} else {
		b = append(b, " (under "...)
		b = appendBytes(b, p.Hard)
		b = append(b, ')')
	}
	for i, t := range top {
		if i == 0 {
			b = append(b, "; largest: "...)
		} else {
			b = append(b, ", "...)
		}
		b = append(b, t...)
	}
	b = append(b, "; its items run again once the pressure is gone, no retry spent"...)
	return string(b)
}
