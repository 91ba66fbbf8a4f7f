package history

import (
	"math"
	"sort"
	"time"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
)

// Params tune how a Model turns into costs. Zero fields take the defaults.
type Params struct {
	// MinSamples is the number of successful batches, over at least two
	// batch sizes, for a firm model (default 3).
	MinSamples int
	// Quantile of the fit's residuals added to the fixed cost (default 0.95).
	Quantile float64
	// Margin is the relative safety margin on every cost (default 0.05).
	Margin float64
	// MarginBytes is added to the fixed cost (default 8 MiB).
	MarginBytes int64
	// BumpBytes and BumpRatio raise the need of a batch killed for memory
	// to max(limit + BumpBytes, limit × BumpRatio), as the Kubernetes
	// VPA does after an OOM kill (defaults 100 MiB and 1.2).
	BumpBytes int64
	BumpRatio float64
	// Growth caps the batch at Growth × the largest successful batch while
	// the model is not firm (slow start, default 2); FirmGrowth once it is
	// (default 4): a fit is not trusted far beyond what it saw.
	Growth, FirmGrowth float64
}

func (p Params) withDefaults() Params {
	if p.MinSamples <= 0 {
		p.MinSamples = 3
	}
	if p.Quantile <= 0 || p.Quantile >= 1 {
		p.Quantile = 0.95
	}
	if p.Margin <= 0 {
		p.Margin = 0.05
	}
	if p.MarginBytes <= 0 {
		p.MarginBytes = 8 << 20
	}
	if p.BumpBytes <= 0 {
		p.BumpBytes = 100 << 20
	}
	if p.BumpRatio <= 1 {
		p.BumpRatio = 1.2
	}
	if p.Growth <= 1 {
		p.Growth = 2
	}
	if p.FirmGrowth <= 1 {
		p.FirmGrowth = 4
	}
	return p
}

// Bump is the need of a batch killed at limit bytes: max(limit +
// BumpBytes, limit × BumpRatio).
func (p Params) Bump(limit int64) int64 {
	p = p.withDefaults()
	return max(satAdd(limit, p.BumpBytes), toBytes(float64(limit)*p.BumpRatio))
}

// State says how much a model knows.
type State int

// The states, from knowing nothing to a firm fit.
const (
	// StateNone: no batch of the profile was recorded.
	StateNone State = iota
	// StateCensored: only batches killed for memory (lower bounds).
	StateCensored
	// StateSlowStart: some successful batches, too few (or of a single
	// size) for a firm fit; batches grow by Params.Growth at most.
	StateSlowStart
	// StateFirm: a robust fit over enough batches of several sizes.
	StateFirm
)

func (s State) String() string {
	switch s {
	case StateCensored:
		return "censored"
	case StateSlowStart:
		return "slow-start"
	case StateFirm:
		return "firm"
	}
	return "none"
}

// censor is a batch killed for memory: need(items, threads) > bytes.
type censor struct {
	items   int64
	threads int
	bytes   int64
	// recent: no batch of the profile succeeded after it.
	recent bool
}

// overshoot is a successful batch that needed more than its task's stated
// costs gave it (declared) by more than Params.Margin: costs that give a
// batch of its items and threads declared bytes are too low.
type overshoot struct {
	items           int64
	threads         int
	declared, bytes int64
}

// Model is what a profile's history says about its costs.
type Model struct {
	// State of the model.
	State State
	// Samples is the number of successful batches with a measured peak,
	// Censored the number killed for memory, Total every record.
	Samples, Censored, Total int
	// Fixed, PerItem and PerThread are the fitted costs in bytes, peak ≈
	// Fixed + PerItem·items + PerThread·threads. A cost the history
	// cannot separate (threads never varied) is 0 and folded into Fixed;
	// with a single batch size, Fixed is 0 and PerItem the largest
	// peak per item seen (an upper bound for larger batches).
	Fixed, PerItem, PerThread float64
	// PerInputByte is the memory per byte of the batch's input files, when
	// it explains the peaks clearly better than items and threads alone
	// (0 otherwise), and InputPerItem the mean input bytes per item of the
	// fitted batches: peak ≈ Fixed + PerItem·items + PerThread·threads +
	// PerInputByte·input.
	PerInputByte, InputPerItem float64
	// Residual is the Params.Quantile of the residuals above the fit (>= 0).
	Residual float64
	// MaxItems and MaxThreads are the largest successful batch and threads.
	MaxItems   int64
	MaxThreads int
	// MaxPeak is the largest peak of a successful batch.
	MaxPeak int64
	// ItemsVaried and ThreadsVaried say whether the fit could separate
	// the per-item and per-thread costs.
	ItemsVaried, ThreadsVaried bool
	// DurationFixed and DurationPerItem fit the successful batches'
	// duration ≈ DurationFixed + DurationPerItem·items.
	DurationFixed, DurationPerItem time.Duration
	// EfficientBatch is the batch size with the least predicted time per
	// item when larger batches were seen to cost more per item, clearly
	// above the durations' noise (0: none seen); BatchCost is the fit that
	// says so (zero with none).
	EfficientBatch int64
	BatchCost      BatchCost
	// Efficiency is the mean of peak ÷ reserved memory over the successful
	// batches whose reservation is known (0: none), as Slurm's seff.
	Efficiency float64
	// LastTime is when the newest record ended.
	LastTime time.Time

	censors    []censor
	overshoots []overshoot
}

// Costs is a model turned into an estimate the governor can use.
type Costs struct {
	// FixedBytes, PerItemBytes and PerThreadBytes, margins included.
	// When the model has an input term, PerItemBytes prices an item of
	// the profile's mean input (InputPerItem bytes); ForInput reprices it.
	FixedBytes, PerItemBytes, PerThreadBytes int64
	// PerInputByte (margin included) and InputPerItem are the model's
	// input term (0 when it has none).
	PerInputByte, InputPerItem float64
	// BatchCap caps the batch (0: none): the slow start.
	BatchCap int64
}

// Need is the memory the costs give to a batch.
func (c Costs) Need(items int64, threads int) int64 {
	return satAdd(satAdd(c.FixedBytes, satMul(c.PerItemBytes, items)), satMul(c.PerThreadBytes, int64(threads)))
}

// ForInput reprices the per-item cost for items of perItem input bytes on
// average (a task's own files), when the costs have an input term.
func (c Costs) ForInput(perItem float64) Costs {
	if c.PerInputByte <= 0 || perItem <= 0 {
		return c
	}
	c.PerItemBytes = toBytes(math.Ceil(float64(c.PerItemBytes) + c.PerInputByte*(perItem-c.InputPerItem)))
	return c
}

// Predict is the fitted peak of a batch of the profile's mean input per
// item, without margins.
func (m Model) Predict(items int64, threads int) float64 {
	return m.Fixed + (m.PerItem+m.PerInputByte*m.InputPerItem)*float64(items) + m.PerThread*float64(threads)
}

// predictRecord is the fitted peak of a recorded batch, its input included.
func (m Model) predictRecord(r Record) float64 {
	return m.Fixed + m.PerItem*float64(r.Items) + m.PerThread*float64(r.Threads) + m.PerInputByte*float64(r.InputBytes)
}

// Fit builds the model of one profile's records (oldest first).
func Fit(recs []Record, p Params) Model {
	p = p.withDefaults()
	m := Model{Total: len(recs)}
	var ok []Record
	var effSum float64
	var effN int
	lastOK := -1
	for i, r := range recs {
		if r.Time.After(m.LastTime) {
			m.LastTime = r.Time
		}
		switch {
		case r.Succeeded():
			ok = append(ok, r)
			lastOK = i
			m.MaxItems = max(m.MaxItems, r.Items)
			m.MaxThreads = max(m.MaxThreads, r.Threads)
			m.MaxPeak = max(m.MaxPeak, r.Need())
			if r.LimitBytes > 0 {
				effSum += float64(r.Need()) / float64(r.LimitBytes)
				effN++
			}
		case r.KilledForMemory && r.Items > 0 && r.CensorBytes() > 0:
			m.Censored++
		}
	}
	for i, r := range recs {
		switch {
		case r.KilledForMemory && r.Items > 0 && r.CensorBytes() > 0:
			m.censors = append(m.censors, censor{items: r.Items, threads: r.Threads, bytes: r.CensorBytes(), recent: i > lastOK})
		case r.Succeeded() && r.declared() > 0 && float64(r.Need()) > float64(r.declared())*(1+p.Margin):
			m.overshoots = append(m.overshoots, overshoot{items: r.Items, threads: r.Threads, declared: r.declared(), bytes: r.Need()})
		}
	}
	m.Samples = len(ok)
	if effN > 0 {
		m.Efficiency = effSum / float64(effN)
	}
	switch {
	case len(ok) == 0 && m.Censored > 0:
		m.State = StateCensored
		return m
	case len(ok) == 0:
		return m
	}
	m.fitMemory(ok, p)
	m.fitDuration(ok)
	if len(ok) >= p.MinSamples && m.ItemsVaried {
		m.State = StateFirm
	} else {
		m.State = StateSlowStart
	}
	return m
}

// fitMemory fits the peak of the successful batches.
func (m *Model) fitMemory(ok []Record, p Params) {
	items := make([]float64, len(ok))
	threads := make([]float64, len(ok))
	peak := make([]float64, len(ok))
	for i, r := range ok {
		items[i], threads[i], peak[i] = float64(r.Items), float64(r.Threads), float64(r.Need())
	}
	m.ItemsVaried, m.ThreadsVaried = varies(items), varies(threads)
	if !m.ItemsVaried {
		// One batch size: fixed and per-item costs cannot be told apart.
		// The largest peak per item bounds every larger batch (costs are
		// not negative), and the slow start only ever grows the batch.
		for i := range ok {
			m.PerItem = max(m.PerItem, peak[i]/items[i])
		}
		return
	}
	cols := [][]float64{items}
	if m.ThreadsVaried {
		cols = append(cols, threads)
	}
	beta, resid := fitNonNegative(cols, peak)
	m.Fixed, m.PerItem = max(beta[0], 0), beta[1]
	if m.ThreadsVaried {
		m.PerThread = beta[2]
	}
	m.fitInput(ok, cols, peak, resid, p)
	// Residuals against the clamped fit, so the quantile covers the clamp.
	for i := range resid {
		resid[i] = peak[i] - m.predictRecord(ok[i])
	}
	sort.Float64s(resid)
	m.Residual = max(stat.Quantile(p.Quantile, stat.Empirical, resid, nil), 0)
}

// fitInput adds the input term when the batches' input per item varies
// (by more than 10 %, over one more batch than a firm fit needs) and the
// fit with it leaves residuals at most 70 % of those without it (mean
// absolute): a program whose memory follows its files' size (an image
// decoder) then gets per-byte costs; one whose memory does not is left
// alone, the extra column being noise.
func (m *Model) fitInput(ok []Record, cols [][]float64, peak, resid []float64, p Params) {
	if len(ok) < p.MinSamples+2 {
		return
	}
	input := make([]float64, len(ok))
	perItem := make([]float64, len(ok))
	var total, items float64
	for i, r := range ok {
		input[i], perItem[i] = float64(r.InputBytes), float64(r.InputBytes)/float64(r.Items)
		total += input[i]
		items += float64(r.Items)
	}
	mean := stat.Mean(perItem, nil)
	if mean <= 0 || stat.StdDev(perItem, nil) <= 0.1*mean {
		return
	}
	with := append(append([][]float64(nil), cols...), input)
	beta, r := fitNonNegative(with, peak)
	slope := beta[len(beta)-1]
	if slope <= 0 || meanAbs(r) > 0.7*meanAbs(resid) {
		return
	}
	m.Fixed, m.PerItem = max(beta[0], 0), beta[1]
	if m.ThreadsVaried {
		m.PerThread = beta[2]
	}
	m.PerInputByte, m.InputPerItem = slope, total/items
}

// fitDuration fits the duration of the successful batches against items.
func (m *Model) fitDuration(ok []Record) {
	items := make([]float64, len(ok))
	secs := make([]float64, len(ok))
	var total float64
	var n int64
	for i, r := range ok {
		items[i], secs[i] = float64(r.Items), r.Duration.Seconds()
		total += secs[i]
		n += r.Items
	}
	if !varies(items) {
		m.DurationPerItem = time.Duration(total / float64(n) * float64(time.Second))
		return
	}
	beta, _ := fitNonNegative([][]float64{items}, secs)
	m.DurationFixed = time.Duration(max(beta[0], 0) * float64(time.Second))
	m.DurationPerItem = time.Duration(beta[1] * float64(time.Second))
	m.fitBatchCost(items, secs)
}

// fitBatchCost looks for batches that cost more per item as they grow:
// duration ≈ a + b·n + c·n² with c > 0 puts the least time per item,
// a/n + b + c·n, at n* = √(a/c). EfficientBatch is n* when at least three
// batch sizes were seen, c stands out of the durations' noise
// (growthShown), and n* saves at least 5 % per item against the largest
// batch seen; 0 otherwise.
func (m *Model) fitBatchCost(items, secs []float64) {
	distinct := map[float64]bool{}
	sq := make([]float64, len(items))
	for i, n := range items {
		distinct[n] = true
		sq[i] = n * n
	}
	if len(distinct) < 3 {
		return
	}
	beta, resid := fitNonNegative([][]float64{items, sq}, secs)
	a, b, c := max(beta[0], 0), beta[1], beta[2]
	if a <= 0 || c <= 0 || !growthShown(items, sq, resid, c) {
		return
	}
	per := func(n float64) float64 { return a/n + b + c*n }
	star := math.Sqrt(a / c)
	largest := float64(m.MaxItems)
	if star >= largest || per(star) > 0.95*per(largest) {
		return
	}
	m.EfficientBatch = max(int64(math.Round(star)), 1)
	m.BatchCost = BatchCost{Fixed: a, PerItem: b, PerItemSquared: c}
}

// growthStandardErrors is how many standard errors above 0 the fitted
// growth c must be before it sizes batches. Durations drift with the
// machine's load (on a shared virtual machine by 10 % within minutes), and
// a fit of a few batch sizes bends its parabola to whichever size happened
// to run in a slow hour: on this project's bench machine, 128 batches of
// packing A (a linear work) at 14, 21, 22 and once 32 items fitted c at
// 1.8 standard errors and n* at 21, capping batches at 31, so that 64
// items ran as 22 + 21 + 21 and paid a third batch's fixed costs. The bar
// is high because the two errors differ: a cap the noise put there keeps
// the batches at its size, where the fit cannot see past it, while a
// growth missed lets batches grow, and batches of many sizes show it.
const growthStandardErrors = 3

// growthShown reports whether the fitted c of a + b·n + c·n² stands at
// least growthStandardErrors standard errors above 0. Its standard error
// is the residuals' scale (their MAD, so that a stalled batch does not
// hide a real growth) over the part of n² that n and the intercept do not
// explain (Frisch–Waugh). With no residual to estimate a scale from (a fit
// of three batches, or one that is exact) the growth stands as fitted.
func growthShown(items, sq, resid []float64, c float64) bool {
	if len(resid) <= 3 {
		return true
	}
	scale := mad(resid)
	if scale == 0 {
		return true
	}
	// The residual sum of squares of n² regressed on n.
	ones := make([]float64, len(items))
	for i := range ones {
		ones[i] = 1
	}
	line := wls([][]float64{items}, sq, ones)
	if line == nil {
		return false
	}
	var rss float64
	for _, r := range residuals([][]float64{items}, sq, line) {
		rss += r * r
	}
	if rss <= 0 {
		return false
	}
	return c >= growthStandardErrors*scale/math.Sqrt(rss)
}

// BatchCost is a profile's batch duration in seconds, Fixed +
// PerItem·n + PerItemSquared·n² for n items, fitted where larger batches
// were seen to cost more per item (PerItemSquared > 0).
type BatchCost struct {
	Fixed          float64 `json:"fixedSeconds"`
	PerItem        float64 `json:"perItemSeconds"`
	PerItemSquared float64 `json:"perItemSquaredSeconds"`
}

// costlierPerItem is how much more time per item than the least a batch
// may take and still be chosen: the bar fitBatchCost sets for n* itself.
// A saving the fit cannot tell from the noise of its batches' durations
// is no reason for more batches, each paying the fixed costs again (a
// process start, memory allocated anew).
const costlierPerItem = 1.05

// Cap is the batch cap by the cost: the largest batch whose predicted time
// per item, a/n + b + c·n, is within 5 % of the least, at n* = √(a/c).
// The governor evens a task's items left out under it, so they run in the
// fewest batches that keep to that bar: where n* is 22 but 32 items cost
// 1.4 % more per item, 64 items run as 32 + 32, not 22 + 21 + 21, sparing a
// batch's fixed costs the fit cannot tell from noise. 0 for a cost with
// no growth (c = 0).
func (c BatchCost) Cap() int64 {
	if c.PerItemSquared <= 0 || c.Fixed <= 0 {
		return 0
	}
	a, b, q := c.Fixed, c.PerItem, c.PerItemSquared
	// a/n + b + q·n = bar·(b + 2√(a·q)), the larger root in n.
	rhs := costlierPerItem*(b+2*math.Sqrt(a*q)) - b
	n := (rhs + math.Sqrt(max(rhs*rhs-4*a*q, 0))) / (2 * q)
	// Never below n* as EfficientBatch rounds it.
	return max(int64(math.Floor(n+1e-9)), int64(math.Round(math.Sqrt(a/q))), 1)
}

// Costs turns the model into an estimate: the fit, the residual quantile
// and the margins, raised so that every batch killed for memory would get
// more than it had (bumped when no batch succeeded since), and capped in
// batch size while the model is not firm. ok is false when the model
// knows nothing (StateNone).
func (m Model) Costs(p Params) (Costs, bool) {
	p = p.withDefaults()
	var c Costs
	switch m.State {
	case StateNone:
		return c, false
	case StateCensored:
		// Lower bounds only: the most demanding need per item, bumped,
		// no larger batch than the smallest that was killed.
		var per float64
		c.BatchCap = math.MaxInt64
		for _, k := range m.censors {
			per = max(per, float64(p.Bump(k.bytes))/float64(k.items))
			c.BatchCap = min(c.BatchCap, k.items)
		}
		c.PerItemBytes = toBytes(math.Ceil(per))
		return c, true
	}
	r := 1 + p.Margin
	c.FixedBytes = satAdd(toBytes(m.Fixed*r+m.Residual), p.MarginBytes)
	c.PerItemBytes = toBytes(math.Ceil((m.PerItem + m.PerInputByte*m.InputPerItem) * r))
	c.PerInputByte, c.InputPerItem = m.PerInputByte*r, m.InputPerItem
	c.PerThreadBytes = toBytes(math.Ceil(m.PerThread * r))
	growth := p.Growth
	if m.State == StateFirm {
		growth = p.FirmGrowth
	}
	c.BatchCap = max(toBytes(float64(m.MaxItems)*growth), 1)
	return m.raise(c, p), true
}

// SmallCosts are costs valid for batches of at most MaxItems when the
// model knows a single batch size (ItemsVaried false): the largest peak
// seen, margins included, as a fixed cost. Costs is exact at that size
// and safe above it, but not below (it assumes no fixed cost); a caller
// that may run a smaller batch uses these. ok is false for other states.
func (m Model) SmallCosts(p Params) (Costs, bool) {
	p = p.withDefaults()
	if m.State < StateSlowStart || m.ItemsVaried {
		return Costs{}, false
	}
	c := Costs{FixedBytes: satAdd(toBytes(float64(m.MaxPeak)*(1+p.Margin)), p.MarginBytes), BatchCap: m.MaxItems}
	return m.raise(c, p), true
}

// Refutes reports whether a batch of the profile was killed for memory
// holding at least what c gives a batch of its items and threads: costs
// (a declaration) its history proved too low, for whichever task of the
// profile states them next.
func (m Model) Refutes(c Costs) bool {
	for _, k := range m.censors {
		if c.Need(k.items, k.threads) <= k.bytes {
			return true
		}
	}
	return false
}

// Exceeded is how far stated costs c fell short of what the batches of
// the tasks stating them needed: the largest ratio of need to what c gave
// among the profile's successful batches whose task's stated costs gave
// them what c gives their items and threads (Record.DeclaredBytes; in
// older records, the reservation), and that needed more than that by
// more than Params.Margin, whatever they were reserved (a raise
// included); 0 when none did. Batches of tasks stating other costs prove
// nothing about c, unless those costs give the same bytes at that size.
func (m Model) Exceeded(c Costs) float64 {
	var ratio float64
	for _, o := range m.overshoots {
		if c.Need(o.items, o.threads) == o.declared {
			ratio = max(ratio, float64(o.bytes)/float64(o.declared))
		}
	}
	return ratio
}

// Scaled is c with its memory costs multiplied by s (rounded up); the
// batch cap and the input's mean are kept.
func (c Costs) Scaled(s float64) Costs {
	c.FixedBytes = toBytes(math.Ceil(float64(c.FixedBytes) * s))
	c.PerItemBytes = toBytes(math.Ceil(float64(c.PerItemBytes) * s))
	c.PerThreadBytes = toBytes(math.Ceil(float64(c.PerThreadBytes) * s))
	c.PerInputByte *= s
	return c
}

// raise scales c up until every censored batch gets more than it had:
// need > killed bytes + MarginBytes, or the bumped need when no batch
// succeeded since the kill. Scaling keeps the shape of the costs, so a
// larger batch is never given less than the kill taught.
func (m Model) raise(c Costs, p Params) Costs {
	s := 1.0
	for _, k := range m.censors {
		floor := satAdd(k.bytes, p.MarginBytes)
		if k.recent {
			floor = p.Bump(k.bytes)
		}
		if need := c.Need(k.items, k.threads); need > 0 && need < floor {
			s = max(s, float64(floor)/float64(need))
		}
	}
	if s > 1 {
		c = c.Scaled(s)
	}
	return c
}

// fitNonNegative fits y ≈ b0 + Σ bj·cols[j] robustly (fitRobust); a slope
// that comes out negative, or a column collinear with the others, is
// dropped (set to 0) and the rest refitted, so no cost is ever negative.
// With no column left it is the weighted mean, never singular for len(y) >= 1. It returns the coefficients (intercept first)
// and the residuals.
func fitNonNegative(cols [][]float64, y []float64) ([]float64, []float64) {
	active := make([]bool, len(cols))
	for j := range active {
		active[j] = true
	}
	for {
		var use [][]float64
		var idx []int
		for j, a := range active {
			if a {
				use = append(use, cols[j])
				idx = append(idx, j)
			}
		}
		b, resid := fitRobust(use, y)
		if b == nil && len(idx) > 0 {
			// Singular (collinear columns): drop the last one left.
			active[idx[len(idx)-1]] = false
			continue
		}
		if b == nil {
			return make([]float64, len(cols)+1), make([]float64, len(y))
		}
		beta := make([]float64, len(cols)+1)
		beta[0] = b[0]
		worst, worstJ := 0.0, -1
		for k, j := range idx {
			beta[j+1] = b[k+1]
			if b[k+1] < worst {
				worst, worstJ = b[k+1], j
			}
		}
		if worstJ < 0 {
			return beta, resid
		}
		active[worstJ] = false
	}
}

// fitRobust is an M-estimator by iteratively reweighted least squares:
// Huber weights from the least-squares start, then Tukey's bisquare
// (which gives gross outliers no weight), the scale being the residuals'
// MAD. It returns the coefficients (intercept first) and residuals.
func fitRobust(cols [][]float64, y []float64) ([]float64, []float64) {
	n, k := len(y), len(cols)+1
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	beta := wls(cols, y, w)
	if beta == nil {
		return nil, nil
	}
	resid := residuals(cols, y, beta)
	if n <= k {
		return beta, resid
	}
	floor := 1e-6 * meanAbs(y)
	for iter := range 30 {
		s := max(mad(resid), floor)
		if s == 0 {
			break
		}
		for i, r := range resid {
			u := math.Abs(r) / s
			if iter < 10 {
				const h = 1.345
				w[i] = 1
				if u > h {
					w[i] = h / u
				}
			} else {
				const c = 4.685
				w[i] = 0
				if u < c {
					v := 1 - (u/c)*(u/c)
					w[i] = v * v
				}
			}
		}
		next := wls(cols, y, w)
		if next == nil {
			break
		}
		change := 0.0
		for j := range next {
			change = max(change, math.Abs(next[j]-beta[j]))
		}
		beta = next
		resid = residuals(cols, y, beta)
		if iter >= 10 && change <= 1e-9*(1+meanAbs(beta)) {
			break
		}
	}
	return beta, resid
}

// wls solves the weighted least squares by QR; nil when it is singular
// (fewer weighted rows than unknowns, a column constant over the rows
// that weigh, so collinear with the intercept, or collinear columns) or
// gives a coefficient that is not finite. The bisquare weighs gross
// outliers 0: the rows left may all share one batch size, where a
// nearly singular solve would give any slope (1.9e20 bytes per item was
// seen, TestFitWhenTheWeightedRowsShareOneSize).
func wls(cols [][]float64, y, w []float64) []float64 {
	n, k := len(y), len(cols)+1
	var rows int
	for _, wi := range w {
		if wi > 0 {
			rows++
		}
	}
	if rows < k {
		return nil
	}
	for _, c := range cols {
		first, varied := math.NaN(), false
		for i, wi := range w {
			if wi <= 0 {
				continue
			}
			if math.IsNaN(first) {
				first = c[i]
			} else if c[i] != first {
				varied = true
				break
			}
		}
		if !varied {
			return nil
		}
	}
	a := mat.NewDense(rows, k, nil)
	b := mat.NewDense(rows, 1, nil)
	r := 0
	for i := range n {
		if w[i] <= 0 {
			continue
		}
		sw := math.Sqrt(w[i])
		a.Set(r, 0, sw)
		for j, c := range cols {
			a.Set(r, j+1, sw*c[i])
		}
		b.Set(r, 0, sw*y[i])
		r++
	}
	var x mat.Dense
	if err := x.Solve(a, b); err != nil {
		return nil
	}
	out := make([]float64, k)
	for j := range out {
		out[j] = x.At(j, 0)
		if math.IsNaN(out[j]) || math.IsInf(out[j], 0) {
			return nil
		}
	}
	return out
}

func residuals(cols [][]float64, y, beta []float64) []float64 {
	out := make([]float64, len(y))
	for i := range y {
		p := beta[0]
		for j, c := range cols {
			p += beta[j+1] * c[i]
		}
		out[i] = y[i] - p
	}
	return out
}

// mad is the median absolute deviation from the median, scaled to the
// standard deviation of a normal distribution.
func mad(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	med := stat.Quantile(0.5, stat.Empirical, s, nil)
	for i := range s {
		s[i] = math.Abs(s[i] - med)
	}
	sort.Float64s(s)
	return 1.4826 * stat.Quantile(0.5, stat.Empirical, s, nil)
}

func meanAbs(x []float64) float64 {
	var s float64
	for _, v := range x {
		s += math.Abs(v)
	}
	return s / float64(max(len(x), 1))
}

func varies(x []float64) bool {
	for _, v := range x {
		if v != x[0] {
			return true
		}
	}
	return false
}

// toBytes converts a non-negative amount to bytes, saturating.
func toBytes(v float64) int64 {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= math.MaxInt64:
		return math.MaxInt64
	}
	return int64(v)
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
