package governor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// Sentinel errors of the reservation life cycle.
var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("governor closed")
	// ErrAlreadyReleased is returned by a second Release of a reservation
	// (its tombstone); no counter changes.
	ErrAlreadyReleased = errors.New("reservation already released")
	// ErrUnknownReservation is returned for a reservation this governor
	// never issued (the zero Reservation, or another governor's).
	ErrUnknownReservation = errors.New("unknown reservation")
)

// instances numbers governors so that a reservation from another governor is
// recognised.
var instances atomic.Uint64

// gpuEntry is one GPU of the registry. Entries keep their index while any
// reservation refers to them; an absent entry with no reference may be
// reused for a new GPU.
type gpuEntry struct {
	id, name                string
	present, known, unified bool
	total, free, margin     int64
	reserved                int64 // VRAM reserved (dedicated GPUs only)
	refs                    int   // active reservations on this GPU
}

// scratchEntry is one scratch volume of the registry, indexed like gpuEntry.
type scratchEntry struct {
	path                       string
	present, rotational, known bool
	free, reserved             int64 // free: the last measure
	refs                       int
}

// registryEntry is what registrySlot needs of a GPU or scratch entry.
type registryEntry interface {
	// key identifies the hardware (GPU id, volume path).
	key() string
	// reusable is true for an entry gone with no reservation left on it.
	reusable() bool
}

func (e *gpuEntry) key() string        { return e.id }
func (e *gpuEntry) reusable() bool     { return !e.present && e.refs == 0 }
func (e *scratchEntry) key() string    { return e.path }
func (e *scratchEntry) reusable() bool { return !e.present && e.refs == 0 }

// registrySlot returns the index of key's entry: its own, else a reusable
// one not yet claimed in this update (reset), else a new one appended to
// entries and seen. ok is false when the registry is full. Indexes stay
// stable while reservations refer to them.
func registrySlot[E any, P interface {
	*E
	registryEntry
}](entries *[]E, seen *[]bool, key string, limit int) (idx int, ok bool) {
	for i := range *entries {
		if P(&(*entries)[i]).key() == key {
			return i, true
		}
	}
	for i := range *entries {
		if P(&(*entries)[i]).reusable() && !(*seen)[i] {
			var zero E
			(*entries)[i] = zero
			return i, true
		}
	}
	if len(*entries) >= limit {
		return -1, false
	}
	*entries = append(*entries, *new(E))
	*seen = append(*seen, false)
	return len(*entries) - 1, true
}

// slot is one entry of the reservation table. A slot is active between its
// reservation's grant and release; released slots go to the free list.
type slot struct {
	id                       uint64
	active                   bool
	gpu, vol                 int32 // registry indexes, -1 for none
	threads, io, gpuSlots    int32
	memory, gpuMemory, bytes int64 // bytes: scratch lease
}

// deferral is the hysteresis state of one deferring signal.
type deferral struct {
	active     bool
	belowSince time.Time // when the signal went back below; zero while above
	value      float64   // last value seen
	threshold  float64   // absolute threshold of the last snapshot
}

// observe records a new value of the signal.
func (d *deferral) observe(value, threshold float64, enabled bool, now time.Time) {
	d.value, d.threshold = value, threshold
	switch {
	case !enabled:
		d.active, d.belowSince = false, time.Time{}
	case value > threshold:
		d.active, d.belowSince = true, time.Time{}
	case d.active && d.belowSince.IsZero():
		d.belowSince = now
	}
}

// check ends the deferral once the signal stayed below for h, and reports
// whether it is still active.
func (d *deferral) check(now time.Time, h time.Duration) bool {
	if d.active && !d.belowSince.IsZero() && now.Sub(d.belowSince) >= h {
		d.active, d.belowSince = false, time.Time{}
	}
	return d.active
}

// pressureWindow turns PSI's cumulative stall time into the CPU pressure
// of the last second or so, counting only the time the governor's
// reservations left CPUs free: while its own threads fill the usable CPUs,
// any other process makes tasks wait, and that says nothing about room for
// more (no thread is free anyway). avg10 would remember that wait for ten
// seconds past the end of the batch, and hold up the next one, the
// governor's own work stalling itself; the window forgets it at once.
type pressureWindow struct {
	have      bool
	baseAt    time.Time
	baseTotal uint64
	value     float64
}

// pressureWindowSpan is how much time the window spans before it yields a
// new value.
const pressureWindowSpan = time.Second

// observe takes a snapshot's CPU pressure; full says the governor's
// reservations hold every usable CPU. Without SomeTotal it is avg10.
func (w *pressureWindow) observe(p Pressure, full bool, now time.Time) float64 {
	if p.SomeTotal == 0 {
		w.have = false
		if full {
			return 0
		}
		return p.SomeAvg10
	}
	switch {
	case !w.have && !full:
		// The first snapshot: avg10 is all there is to go by.
		w.have, w.baseAt, w.baseTotal, w.value = true, now, p.SomeTotal, p.SomeAvg10
	case full || !w.have || p.SomeTotal < w.baseTotal || now.Before(w.baseAt):
		// Restart the window: no value until it spans the free time alone.
		w.have, w.baseAt, w.baseTotal, w.value = true, now, p.SomeTotal, 0
	case now.Sub(w.baseAt) >= pressureWindowSpan:
		dt := now.Sub(w.baseAt)
		w.value = min(100, 100*float64(p.SomeTotal-w.baseTotal)/float64(dt.Microseconds()))
		w.baseAt, w.baseTotal = now, p.SomeTotal
	}
	return w.value
}

// Governor is the only owner of the machine's budgets. It is safe for
// concurrent use; see doc.go.
type Governor struct {
	cfg   Config // with defaults; immutable after New
	clock clock.PassiveClock
	owner uint64
	// leasePrefix names scratch lease directories; immutable after New.
	leasePrefix string

	mu struct {
		sync.Mutex
		closed   bool
		haveSnap bool
		// snap is the last snapshot, without its GPUs and Scratch slices
		// (the registries hold them).
		snap Snapshot

		// Derived from the last snapshot and the config.
		memCapacity, memMargin, memAvailable int64
		cpus, cpusReserved                   int
		gpuSlots                             int

		gpus    []gpuEntry
		scratch []scratchEntry

		// Running totals of the active reservations.
		memReserved      int64
		threadsReserved  int
		ioReserved       int
		gpuSlotsReserved int
		active           int

		slots  []slot
		free   []int32 // indexes of inactive slots
		nextID uint64  // next reservation id; ids below it were issued

		generation uint64
		changed    chan struct{} // closed at the next generation bump

		load, io deferral
		// loadByPSI: the load deferral's signal is CPU pressure (percent)
		// rather than the load average, as of the last Update.
		loadByPSI bool
		cpuPSI    pressureWindow
		// gateHeldSince is when Reserve was first held back by the CPU
		// gate with no reservation active; zero when it was not, since
		// the last grant or the end of the CPU deferral.
		gateHeldSince time.Time
		// deferred: a deferral was active after the last Update.
		deferred bool
		// pressure judges the memory outside the batches (pressure.go).
		pressure pressureState
	}
}

// New returns a governor with no snapshot: every decision waits
// (NoSnapshot) until the first Update.
func New(cfg Config, opts ...Option) *Governor {
	g := &Governor{cfg: cfg.withDefaults(), clock: clock.RealClock{}, owner: instances.Add(1), leasePrefix: DefaultLeasePrefix}
	for _, o := range opts {
		o(g)
	}
	g.mu.nextID = 1
	g.mu.changed = make(chan struct{})
	return g
}

// Update hands the governor a snapshot of the machine. It never revokes a
// granted reservation: a budget that shrinks below what is reserved only
// makes new demands wait. The generation is bumped, waking every Changed
// channel, when the hardware registry changes: the first snapshot, a GPU or
// scratch volume seen or gone or resized, the cgroup memory limit, the
// memory capacity or the usable CPUs changed.
//
// It reports whether the snapshot freed resources a waiting demand may now
// get: grantable RAM, the VRAM of a dedicated GPU or the free space of a
// scratch volume grew by at least max(64MiB, 1% of the memory capacity),
// or a load or IO pressure deferral ended. The caller may then wake the
// queue at once rather than at its next rescan; small fluctuations do not
// count, so a probe loop never turns into a scan loop.
func (g *Governor) Update(s Snapshot) (freed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		return false
	}
	now := g.clock.Now()
	had := g.mu.haveSnap
	var before headroom
	if had {
		before = g.lockedHeadroom()
		before.deferred = g.mu.deferred
	}
	old := g.mu.snap
	changed := !g.mu.haveSnap ||
		old.CgroupMemoryLimit != s.CgroupMemoryLimit || old.CPUs != s.CPUs
	oldCapacity := g.mu.memCapacity

	gpus, vols := s.GPUs, s.Scratch
	s.GPUs, s.Scratch = nil, nil
	g.mu.snap = s
	g.mu.haveSnap = true

	capacity := s.MemTotal
	if s.CgroupMemoryLimit > 0 {
		capacity = min(capacity, s.CgroupMemoryLimit)
	}
	if g.cfg.MemoryCapacity > 0 {
		capacity = min(capacity, g.cfg.MemoryCapacity)
	}
	capacity = max(capacity, 0)
	g.mu.memCapacity = capacity
	g.mu.memMargin = g.cfg.memoryMargin(capacity)
	avail := s.MemAvailable
	if avail <= 0 {
		avail = capacity // unknown
	}
	if s.CgroupMemoryLimit > 0 && s.CgroupMemoryUsage > 0 {
		avail = min(avail, max(s.CgroupMemoryLimit-s.CgroupMemoryUsage, 0))
	}
	g.mu.memAvailable = avail
	changed = changed || capacity != oldCapacity

	g.mu.cpus = max(s.CPUs, 1)
	g.mu.cpusReserved = g.cfg.cpusReserved(g.mu.cpus)

	if g.lockedUpdateGPUs(gpus) {
		changed = true
	}
	if g.lockedUpdateScratch(vols) {
		changed = true
	}

	// The work the governor admitted is expected load: the signal is the
	// load its active reservations' threads do not account for, so that
	// running CPU-bound batches does not, by itself, hold back the next.
	//
	// Where the kernel has PSI, the CPU signal is CPU pressure instead (the
	// share of the last 10 s in which runnable tasks waited for a CPU): it
	// follows the machine within seconds where the 1-minute load average
	// lags for minutes, and work running within its granted threads on
	// free CPUs makes none. The load average is the fallback.
	g.mu.loadByPSI = s.PSI.Available && g.cfg.cpuGate()
	if g.mu.loadByPSI {
		full := g.mu.threadsReserved >= g.mu.cpus-g.mu.cpusReserved
		g.mu.load.observe(g.mu.cpuPSI.observe(s.PSI.CPU, full, now), g.cfg.CPUPressureThreshold, true, now)
	} else {
		loadThreshold := g.cfg.LoadThreshold * float64(g.mu.cpus)
		foreignLoad := max(s.Load1-float64(g.mu.threadsReserved), 0)
		g.mu.load.observe(foreignLoad, loadThreshold, g.cfg.cpuGate(), now)
	}
	g.mu.io.observe(s.PSI.IO.SomeAvg10, g.cfg.IOPressureThreshold,
		g.cfg.IOPressureThreshold > 0 && s.PSI.Available, now)
	if !g.mu.load.check(now, g.cfg.Hysteresis) {
		g.mu.gateHeldSince = time.Time{}
	}

	g.lockedObservePressure(now)

	if changed {
		g.lockedBump()
	}
	after := g.lockedHeadroom()
	after.deferred = g.mu.load.check(now, g.cfg.Hysteresis) || g.mu.io.check(now, g.cfg.Hysteresis) || g.lockedPressureDeferred(now)
	g.mu.deferred = after.deferred
	return had && after.freedSince(before, max(64<<20, g.mu.memCapacity/100))
}

// lockedCPUGateWaited reports whether the CPU gate has held back demands
// for Config.CPUGateMaxWait with no reservation active, and must let the
// next one through whatever its signal.
// REQUIRES: g.mu held.
func (g *Governor) lockedCPUGateWaited(now time.Time) bool {
	return g.cfg.CPUGateMaxWait >= 0 && g.mu.active == 0 && !g.mu.gateHeldSince.IsZero() &&
		now.Sub(g.mu.gateHeldSince) >= g.cfg.CPUGateMaxWait
}

// lockedGateUntil is when the CPU gate's bound lets demands through
// whatever the signal: CPUGateMaxWait after it first held one back with
// no reservation active; zero when it has not yet, while one is active,
// or with no bound.
// REQUIRES: g.mu held.
func (g *Governor) lockedGateUntil() time.Time {
	if g.cfg.CPUGateMaxWait < 0 || g.mu.active > 0 || g.mu.gateHeldSince.IsZero() {
		return time.Time{}
	}
	return g.mu.gateHeldSince.Add(g.cfg.CPUGateMaxWait)
}

// headroom is what Update compares to tell whether a snapshot freed
// resources.
type headroom struct {
	mem, vram, scratch int64 // the most grantable on one GPU, one volume
	deferred           bool  // a load or IO pressure deferral is active
}

// lockedHeadroom measures the budgets' headroom now (not deferred).
// REQUIRES: g.mu held.
func (g *Governor) lockedHeadroom() headroom {
	h := headroom{mem: g.lockedMemFree()}
	for i := range g.mu.gpus {
		if x := &g.mu.gpus[i]; x.present && x.known && !x.unified {
			h.vram = max(h.vram, g.lockedGPUFree(i))
		}
	}
	for i := range g.mu.scratch {
		if x := &g.mu.scratch[i]; x.present && x.known {
			h.scratch = max(h.scratch, x.free-x.reserved)
		}
	}
	return h
}

// freedSince reports whether h has at least step more of some budget than
// before, or no deferral where before had one.
func (h headroom) freedSince(before headroom, step int64) bool {
	return h.mem-before.mem >= step || h.vram-before.vram >= step ||
		h.scratch-before.scratch >= step || (before.deferred && !h.deferred)
}

// lockedBump advances the generation and wakes the waiters.
// REQUIRES: g.mu held.
func (g *Governor) lockedBump() {
	g.mu.generation++
	close(g.mu.changed)
	g.mu.changed = make(chan struct{})
}

// lockedUpdateGPUs merges the snapshot's GPUs (with the config's overrides)
// into the registry and reports whether the registry changed.
// REQUIRES: g.mu held.
func (g *Governor) lockedUpdateGPUs(in []GPU) bool {
	changed := false
	seen := make([]bool, len(g.mu.gpus), len(g.mu.gpus)+len(in))
	add := func(x GPU) {
		if g.cfg.GPUUnified {
			x.Unified = true
		}
		if !x.Known && g.cfg.GPUMemory > 0 {
			x.Known, x.TotalBytes, x.FreeBytes = true, g.cfg.GPUMemory, g.cfg.GPUMemory
		}
		x.TotalBytes, x.FreeBytes = max(x.TotalBytes, 0), max(x.FreeBytes, 0)
		idx, ok := registrySlot(&g.mu.gpus, &seen, x.ID, MaxGPUs)
		if !ok {
			return
		}
		if seen[idx] {
			return // duplicate id in one snapshot
		}
		seen[idx] = true
		e := &g.mu.gpus[idx]
		if !e.present || e.id != x.ID || e.known != x.Known || e.unified != x.Unified || e.total != x.TotalBytes {
			changed = true
		}
		e.id, e.name, e.present, e.known, e.unified = x.ID, x.Name, true, x.Known, x.Unified
		e.total, e.free = x.TotalBytes, x.FreeBytes
		e.margin = g.cfg.gpuMargin(x.TotalBytes)
	}
	for _, x := range in {
		add(x)
	}
	if len(in) == 0 && (g.cfg.GPUMemory > 0 || g.cfg.GPUUnified) {
		add(GPU{ID: "config", Name: "configured GPU"})
	}
	present := 0
	for i := range g.mu.gpus {
		if !seen[i] && g.mu.gpus[i].present {
			g.mu.gpus[i].present = false
			changed = true
		}
		if g.mu.gpus[i].present {
			present++
		}
	}
	switch {
	case g.cfg.GPUSlots > 0:
		g.mu.gpuSlots = g.cfg.GPUSlots
	case g.cfg.GPUSlots < 0:
		g.mu.gpuSlots = 0
	default:
		g.mu.gpuSlots = present
	}
	return changed
}

// lockedUpdateScratch merges the snapshot's scratch volumes into the
// registry and reports whether the registry changed (a volume seen or gone).
// REQUIRES: g.mu held.
func (g *Governor) lockedUpdateScratch(in []ScratchVolume) bool {
	changed := false
	seen := make([]bool, len(g.mu.scratch), len(g.mu.scratch)+len(in))
	for _, v := range in {
		idx, ok := registrySlot(&g.mu.scratch, &seen, v.Path, MaxScratchVolumes)
		if !ok {
			continue
		}
		if seen[idx] {
			continue
		}
		seen[idx] = true
		e := &g.mu.scratch[idx]
		if !e.present || e.path != v.Path || e.known == v.Unknown {
			changed = true
		}
		if v.Unknown {
			// Seen, unmeasurable now: keep it, and its last measure.
			e.path, e.present, e.known = v.Path, true, false
			continue
		}
		if e.rotational != v.Rotational {
			changed = true
		}
		e.path, e.present, e.known, e.rotational, e.free = v.Path, true, true, v.Rotational, max(v.FreeBytes, 0)
	}
	for i := range g.mu.scratch {
		if !seen[i] && g.mu.scratch[i].present {
			g.mu.scratch[i].present = false
			changed = true
		}
	}
	return changed
}

// lockedMemFree is the RAM still grantable (may be negative):
//
//	min(capacity − margin − reserved, available − margin − (reserved − inUse))
//
// where inUse is the snapshot's WorkMemoryUsage clamped to [0, reserved].
// REQUIRES: g.mu held.
func (g *Governor) lockedMemFree() int64 {
	r := g.mu.memReserved
	inUse := min(max(g.mu.snap.WorkMemoryUsage, 0), r)
	return min(g.mu.memCapacity-g.mu.memMargin-r, g.mu.memAvailable-g.mu.memMargin-(r-inUse))
}

// lockedGPUFree is the VRAM still grantable on a dedicated GPU (may be
// negative): its free memory minus its margin and its reservations.
// REQUIRES: g.mu held.
func (g *Governor) lockedGPUFree(i int) int64 {
	e := &g.mu.gpus[i]
	return min(e.total, e.free) - e.margin - e.reserved
}

// Generation returns the current generation (0 before the first snapshot).
func (g *Governor) Generation() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.generation
}

// Changed returns a channel closed at the next generation bump, or at Close.
func (g *Governor) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.changed
}

// Decide answers an estimate without reserving anything: an observation that
// may be stale as soon as it returns. Only Reserve authorises work.
func (g *Governor) Decide(e Estimate) Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, _ := g.lockedDecide(&e, g.clock.Now())
	return d
}

// Reserve decides and, on Admit or ReduceBatch, reserves every budget of
// the contract at once, atomically under the governor's mutex. ok reports
// whether a reservation was granted; otherwise the Reservation is the zero
// value and nothing is reserved.
func (g *Governor) Reserve(e Estimate) (Decision, Reservation, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	d, p := g.lockedDecide(&e, now)
	if d.Verdict != Admit && d.Verdict != ReduceBatch {
		if (d.Reason == ReasonCPUPressure || d.Reason == ReasonLoadHigh) && g.mu.active == 0 && g.mu.gateHeldSince.IsZero() {
			g.mu.gateHeldSince = now
			d.GateUntil = g.lockedGateUntil()
		}
		return d, Reservation{}, false
	}
	r := g.lockedCommit(&p, &e, now)
	return d, r, true
}

// lockedCommit records a plan as an active reservation.
// REQUIRES: g.mu held; p fits every budget (lockedDecide said so).
func (g *Governor) lockedCommit(p *plan, e *Estimate, now time.Time) Reservation {
	id := g.mu.nextID
	g.mu.nextID++
	var idx int32
	if n := len(g.mu.free); n > 0 {
		idx = g.mu.free[n-1]
		g.mu.free = g.mu.free[:n-1]
	} else {
		g.mu.slots = append(g.mu.slots, slot{})
		idx = int32(len(g.mu.slots) - 1)
	}
	g.mu.slots[idx] = slot{
		id: id, active: true, gpu: p.gpu, vol: p.vol,
		threads: int32(p.threads), io: int32(p.io), gpuSlots: int32(p.gpuSlots),
		memory: p.memory, gpuMemory: p.gpuMemory, bytes: p.scratch,
	}
	g.mu.memReserved += p.memory
	g.mu.threadsReserved += p.threads
	g.mu.ioReserved += p.io
	g.mu.gpuSlotsReserved += p.gpuSlots
	g.mu.active++
	g.mu.gateHeldSince = time.Time{}
	c := Contract{
		Batch: p.batch, BatchRequested: e.BatchMax, ItemsLeft: e.ItemsLeft, Share: p.share, Threads: p.threads,
		MemoryBytes: p.memory, GPUMemoryBytes: p.gpuMemory,
		IOSlots: p.io, GPUSlots: p.gpuSlots, ScratchBytes: p.scratch,
		Generation: g.mu.generation, GrantedAt: now,
	}
	if p.gpu >= 0 {
		e := &g.mu.gpus[p.gpu]
		e.reserved += p.gpuMemory
		e.refs++
		c.GPUID = e.id
	}
	if p.vol >= 0 {
		e := &g.mu.scratch[p.vol]
		e.reserved += p.scratch
		e.refs++
		c.ScratchDir = scratchDir(e.path, g.leasePrefix, id)
	}
	return Reservation{id: id, owner: g.owner, slot: idx, contract: c}
}

// Release returns a reservation's budgets, scratch lease included. It
// succeeds exactly once per reservation; a second call returns
// ErrAlreadyReleased and changes nothing.
func (g *Governor) Release(r Reservation) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		return ErrClosed
	}
	if r.owner != g.owner || r.id == 0 || r.id >= g.mu.nextID {
		return ErrUnknownReservation
	}
	if r.slot < 0 || int(r.slot) >= len(g.mu.slots) {
		return ErrUnknownReservation
	}
	s := &g.mu.slots[r.slot]
	if !s.active || s.id != r.id {
		return ErrAlreadyReleased // issued and not active: its tombstone
	}
	g.mu.memReserved -= s.memory
	g.mu.threadsReserved -= int(s.threads)
	g.mu.ioReserved -= int(s.io)
	g.mu.gpuSlotsReserved -= int(s.gpuSlots)
	g.mu.active--
	if s.gpu >= 0 {
		e := &g.mu.gpus[s.gpu]
		e.reserved -= s.gpuMemory
		e.refs--
	}
	if s.vol >= 0 {
		e := &g.mu.scratch[s.vol]
		e.reserved -= s.bytes
		e.refs--
	}
	*s = slot{}
	g.mu.free = append(g.mu.free, r.slot)
	return nil
}

// Active reports whether a reservation is still active (issued by this
// governor and not released), for tests and callers that hold a
// reservation they did not get from Reserve themselves.
func (g *Governor) Active(r Reservation) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed || r.owner != g.owner || r.slot < 0 || int(r.slot) >= len(g.mu.slots) {
		return false
	}
	s := &g.mu.slots[r.slot]
	return s.active && s.id == r.id
}

// Close destroys every remaining reservation and closes the governor: every
// later call returns ErrClosed (Reserve and Decide answer Wait, Closed).
// Waiters on Changed are woken.
func (g *Governor) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		return ErrClosed
	}
	g.mu.closed = true
	g.mu.slots, g.mu.free = nil, nil
	g.mu.memReserved, g.mu.threadsReserved, g.mu.ioReserved, g.mu.gpuSlotsReserved, g.mu.active = 0, 0, 0, 0, 0
	for i := range g.mu.gpus {
		g.mu.gpus[i].reserved, g.mu.gpus[i].refs = 0, 0
	}
	for i := range g.mu.scratch {
		g.mu.scratch[i].reserved, g.mu.scratch[i].refs = 0, 0
	}
	close(g.mu.changed)
	return nil
}

// scratchDir names the directory of a scratch lease: root/prefix + id. The
// governor only names it; the controller creates it before the batch starts
// and removes it once the lease is released (package scratch).
//
// The name ends with 16 random hex digits after the id: on a volume other
// users may write to, nobody can make the directory of a lease to come in
// advance (to have a root controller hand it to a batch).
func scratchDir(root, prefix string, id uint64) string {
	for len(root) > 1 && root[len(root)-1] == '/' {
		root = root[:len(root)-1]
	}
	if root == "/" {
		root = ""
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand, Go 1.24)
	return root + "/" + prefix + strconv.FormatUint(id, 10) + "-" + hex.EncodeToString(nonce[:])
}

// maxBytes stands for an overflowing amount in decisions.
const maxBytes = math.MaxInt64
