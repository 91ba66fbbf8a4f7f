package reconcile

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// DefaultProvisionalFraction is the share of the memory capacity a task
// with no estimate and no history reserves for its first batch.
const DefaultProvisionalFraction = 0.25

// minProvisional is the least a provisional reservation asks for.
const minProvisional = 64 << 20

// learner is the queue's Learner: it keeps every finished batch in the
// book (in memory, at once) and hands it to persist (the history store,
// asynchronously), and builds the estimates of learning tasks from the
// profile's model. Lock order: queue, then the book, then the governor.
type learner struct {
	book *history.Book
	gov  interface {
		Memory() (grantable, free int64)
	}
	// provisional is the share of the grantable memory of a first batch
	// with nothing known; provisionalBytes, when > 0, replaces it.
	provisional      float64
	provisionalBytes int64
	// efficient caps every batch at the profile's BatchCost.Cap
	// (--batch-policy efficient).
	efficient bool
	// persist hands a record to the store's writer; it never blocks.
	persist func(history.Entry)
	now     func() time.Time
}

var _ queue.Learner = (*learner)(nil)

// Observe records a finished batch. REQUIRES: called by the queue, its
// mutex held: no IO here.
func (l *learner) Observe(t *queue.Task, b queue.Batch, res queue.BatchResult) {
	rec := history.Record{
		Time:            res.Ended,
		Task:            plainName(t.Name),
		Batch:           b.Index,
		Generation:      b.Generation,
		Attempt:         b.Attempt,
		Items:           b.Size,
		Threads:         b.Contract.Threads,
		InputBytes:      res.InputBytes,
		PeakMemoryBytes: res.PeakMemoryBytes,
		WorkingSetBytes: res.PeakWorkingSetBytes,
		LimitBytes:      b.Contract.MemoryBytes,
		Duration:        res.Ended.Sub(res.Started),
		ExitCode:        res.ExitCode,
		Reason:          res.Reason,
		KilledForMemory: res.Reason == v1alpha1.ReasonMemoryExceeded,
		// GPU memory beside memory: GPURecords fits it the same way.
		GPUMemoryBytes:     res.PeakGPUMemoryBytes,
		GPUMeasured:        res.GPUMemoryMeasured,
		GPULimitBytes:      b.Contract.GPUMemoryBytes,
		KilledForGPUMemory: res.Reason == v1alpha1.ReasonGPUMemoryExceeded,
	}
	// What the task's stated costs give the batch, whatever it was
	// reserved: the evidence a declaration is judged by (Model.Exceeded).
	rec.DeclaredBytes, rec.DeclaredGPUBytes = declaredBytes(t.Estimate, b.Size, b.Contract)
	if rec.WorkingSetBytes == 0 {
		// Without a cgroup (the sampler), the peak stands for it.
		rec.WorkingSetBytes = rec.PeakMemoryBytes
	}
	if rec.Time.IsZero() {
		rec.Time = l.now()
	}
	if t.Profile == "" {
		return
	}
	l.book.Add(t.Profile, rec)
	if l.persist != nil {
		l.persist(history.Entry{Profile: t.Profile, Record: rec})
	}
}

// Estimate is the estimate of a learning task's next batch, or of a task
// killed for memory (kills > 0):
//   - a task that stated costs and was never killed keeps them, or,
//     when the batches of the tasks stating them needed more than they
//     gave, a raise (raiseExceeded), until the profile's model has
//     Params.MinSamples successful batches; then, in learned mode, the
//     model's costs; in declared mode, the stated costs when not raised,
//     else each cost the larger of the raise's and the model's (no batch
//     size gets less than either gives it). A batch of the profile
//     killed holding at least what the stated costs give its size ends
//     the wait at once (history.Model.Refutes): the model's costs, so
//     that each task stating them is not killed in turn;
//   - otherwise the model's costs, when it has any (slow start included);
//   - otherwise a provisional reservation at batch.min.
//
// The GPU memory costs follow the same rules from the profile's GPU model
// (gpuEstimate), counting the kills for GPU memory. Only the memory and
// GPU memory costs and the batch cap change; threads and slots stay as
// declared.
func (l *learner) Estimate(t *queue.Task, kills queue.Kills) governor.Estimate {
	m := l.book.Model(t.Profile)
	e := l.estimate(t, kills.Memory, m)
	e = l.gpuEstimate(e, t, kills.GPUMemory)
	// The profile's batch duration, for the governor to weigh a share of
	// memory against the batches' fixed time.
	e.BatchTime, e.ItemTime = m.DurationFixed, m.DurationPerItem
	if l.efficient && m.EfficientBatch > 0 {
		// The largest batch within 5 % of the least predicted time per
		// item: the governor evens the items left out under it.
		e.BatchMax = min(e.BatchMax, max(m.BatchCost.Cap(), e.BatchMin))
	}
	return e
}

// estimate is Estimate before the batch policy.
func (l *learner) estimate(t *queue.Task, kills int, m history.Model) governor.Estimate {
	e := t.Estimate
	declared := e.FixedMemory > 0 || e.PerItemMemory > 0 || e.PerThreadMemory > 0
	p := l.book.Params()
	c, ok := m.Costs(p)
	c = c.ForInput(t.InputBytesPerItem)
	stated := history.Costs{FixedBytes: e.FixedMemory, PerItemBytes: e.PerItemMemory, PerThreadBytes: e.PerThreadMemory}
	if kills == 0 && declared && !m.Refutes(stated) {
		// The declaration stands unless the batches of the tasks
		// stating it needed more (every task stating it is raised, not
		// only the one whose batches did); then each cost is the larger
		// of the raise's and the model's, so that no batch size gets
		// less than either gives it.
		raised := raiseExceeded(m, stated, p.Margin)
		learning := t.Mode == v1alpha1.EstimateLearned && m.Samples >= p.MinSamples
		switch {
		case learning:
		case raised != stated && ok && m.Samples >= p.MinSamples:
			e.FixedMemory, e.PerItemMemory, e.PerThreadMemory = max(raised.FixedBytes, c.FixedBytes), max(raised.PerItemBytes, c.PerItemBytes), max(raised.PerThreadBytes, c.PerThreadBytes)
			return e
		default:
			e.FixedMemory, e.PerItemMemory, e.PerThreadMemory = raised.FixedBytes, raised.PerItemBytes, raised.PerThreadBytes
			return e
		}
	}
	if ok {
		if small, ok := m.SmallCosts(p); ok {
			// One batch size known (n0): the costs assume no fixed cost,
			// exact at n0 and safe above it only. The items left below
			// n0 get the peak at n0; else the batch is at least n0.
			if t.ItemsTotal-t.ItemsDone < m.MaxItems {
				c = small
			} else {
				e.BatchMin = max(e.BatchMin, min(m.MaxItems, e.BatchMax))
			}
		}
		e.FixedMemory, e.PerItemMemory, e.PerThreadMemory = c.FixedBytes, c.PerItemBytes, c.PerThreadBytes
		if c.BatchCap > 0 {
			e.BatchMax = min(e.BatchMax, max(c.BatchCap, e.BatchMin))
		}
		return e
	}
	// Nothing known: batch.min under a provisional reservation, clamped
	// to what is free so that it does not wait for a guess.
	grant, free := l.gov.Memory()
	prov := l.provisionalBytes
	if prov <= 0 {
		prov = int64(float64(grant) * l.provisional)
	}
	prov = max(min(prov, free), min(minProvisional, grant))
	e.FixedMemory, e.PerItemMemory, e.PerThreadMemory = max(prov, 1), 0, 0
	e.BatchMax = e.BatchMin
	return e
}

// gpuEstimate revises the GPU memory costs of e as estimate revises its
// memory costs, from the profile's GPU model: a task that reserves GPU
// memory keeps its declaration (or its raise, when the batches of the
// tasks stating it needed more: raiseExceeded) until the model has
// Params.MinSamples successful batches, then, learning, takes the model's
// costs (declared mode: when raised, each cost the larger of the raise's
// and the model's); after a kill for GPU
// memory, its own or a batch of the profile's at no less than the
// declaration, the model's costs, the kill bumped. A task that reserves no GPU
// memory has none measured: it is left as it is.
func (l *learner) gpuEstimate(e governor.Estimate, t *queue.Task, kills int) governor.Estimate {
	if e.FixedGPUMemory <= 0 && e.PerItemGPUMemory <= 0 {
		return e
	}
	m := l.book.GPUModel(t.Profile)
	p := l.book.Params()
	c, ok := m.Costs(p)
	if !ok {
		return e
	}
	// One batch size known (SmallCosts): exact there, safe above it only.
	small, oneSize := m.SmallCosts(p)
	below := oneSize && t.ItemsTotal-t.ItemsDone < m.MaxItems
	if below {
		c = small
	}
	// The Estimate has no GPU memory per thread: at the threads asked.
	fixed := c.FixedBytes + c.PerThreadBytes*int64(max(e.Threads, 1))
	stated := history.Costs{FixedBytes: e.FixedGPUMemory, PerItemBytes: e.PerItemGPUMemory}
	if kills == 0 && !m.Refutes(stated) {
		// As memory's: the declaration stands unless the batches of the
		// tasks stating it needed more; then each cost is the larger of
		// the raise's and the model's.
		raised := raiseExceeded(m, stated, p.Margin)
		switch {
		case t.Mode == v1alpha1.EstimateLearned && m.Samples >= p.MinSamples:
		case raised != stated && m.Samples >= p.MinSamples:
			e.FixedGPUMemory, e.PerItemGPUMemory = max(raised.FixedBytes, fixed), max(raised.PerItemBytes, c.PerItemBytes)
			return e
		default:
			e.FixedGPUMemory, e.PerItemGPUMemory = raised.FixedBytes, raised.PerItemBytes
			return e
		}
	}
	e.FixedGPUMemory, e.PerItemGPUMemory = fixed, c.PerItemBytes
	if oneSize && !below {
		e.BatchMin = max(e.BatchMin, min(m.MaxItems, e.BatchMax))
	}
	if c.BatchCap > 0 {
		e.BatchMax = min(e.BatchMax, max(c.BatchCap, e.BatchMin))
	}
	return e
}

// declaredBytes is what the stated costs in e give a batch of size items
// run under contract c: its memory (with a unified GPU's costs, which
// its memory reservation holds too) and its GPU memory on a dedicated
// GPU (else 0). Saturating, never negative for costs that are not.
func declaredBytes(e governor.Estimate, size int64, c governor.Contract) (memory, gpu int64) {
	memory = history.Costs{FixedBytes: e.FixedMemory, PerItemBytes: e.PerItemMemory, PerThreadBytes: e.PerThreadMemory}.Need(size, c.Threads)
	gpu = history.Costs{FixedBytes: e.FixedGPUMemory, PerItemBytes: e.PerItemGPUMemory}.Need(size, 0)
	if c.GPUSlots > 0 && c.GPUMemoryBytes == 0 {
		return min(memory, math.MaxInt64-gpu) + gpu, 0
	}
	return memory, gpu
}

// raiseExceeded is stated raised by what the batches of the tasks stating
// it needed (history.Model.Exceeded), the margin on top; stated itself
// when none needed more than it by more than the margin. Only the batches
// of tasks stating the costs judge them: a fit pooled over a profile's
// tasks, margins included, gives an exact declaration more than it states.
func raiseExceeded(m history.Model, stated history.Costs, margin float64) history.Costs {
	if r := m.Exceeded(stated); r > 0 {
		return stated.Scaled(r * (1 + margin))
	}
	return stated
}

// Suggestion is what the history says a task should declare.
type Suggestion struct {
	// Profile and its model.
	Profile string
	Model   history.Model
	// Costs are the learned costs, margins included (valid when OK).
	Costs history.Costs
	OK    bool
	// Note qualifies the suggestion (empty when none).
	Note string
}

// Suggest returns the learned costs of a profile. With a single batch size
// seen, fixed and per-item costs cannot be told apart: the suggestion is
// then the peak at that size as a fixed cost (safe up to it), and Note
// says so.
func Suggest(book *history.Book, profile string) Suggestion {
	return suggestFrom(profile, book.Model(profile), book.Params())
}

// SuggestGPU is Suggest for the profile's GPU memory (history.Book.GPUModel).
func SuggestGPU(book *history.Book, profile string) Suggestion {
	return suggestFrom(profile, book.GPUModel(profile), book.Params())
}

// suggestFrom is the suggestion a profile's model m makes.
func suggestFrom(profile string, m history.Model, p history.Params) Suggestion {
	c, ok := m.Costs(p)
	s := Suggestion{Profile: profile, Model: m, Costs: c, OK: ok && m.State >= history.StateSlowStart}
	if small, ok := m.SmallCosts(p); ok {
		s.Costs = small
		s.Note = fmt.Sprintf("only batches of %d items seen: valid up to that size", m.MaxItems)
	}
	return s
}

// ResourcesBlock is a resources block to paste, from learned costs.
func ResourcesBlock(c history.Costs) string { return resourcesBlock(c, "memory") }

// resourcesBlock is ResourcesBlock for the cost named key (memory,
// gpuMemory).
func resourcesBlock(c history.Costs, key string) string {
	return fmt.Sprintf("resources: {fixed: {%[1]s: %[2]s}, perItem: {%[1]s: %[3]s}, perThread: {%[1]s: %[4]s}}",
		key, SuggestedQuantity(c.FixedBytes), SuggestedQuantity(c.PerItemBytes), SuggestedQuantity(c.PerThreadBytes))
}

// SuggestedQuantity is b bytes rounded up to a quantity a person writes,
// in Kubernetes notation: the largest binary unit (Ki, Mi, Gi) not above
// b, whole from 16 units up (30188Ki is 30Mi), in quarters below (13.1Mi
// is 13.25Mi), so that a suggestion is never below what was measured
// and never more than a quarter of a unit, or a sixteenth, above it.
// "0" for nothing.
func SuggestedQuantity(b int64) string {
	if b <= 0 {
		return "0"
	}
	unit, suffix := int64(1), ""
	for _, u := range []struct {
		size   int64
		suffix string
	}{{1 << 30, "Gi"}, {1 << 20, "Mi"}, {1 << 10, "Ki"}} {
		if b >= u.size {
			unit, suffix = u.size, u.suffix
			break
		}
	}
	if unit == 1 || b >= 16*unit {
		n := b / unit
		if b%unit != 0 {
			n++
		}
		return strconv.FormatInt(n, 10) + suffix
	}
	quarter := unit / 4
	q := b / quarter
	if b%quarter != 0 {
		q++
	}
	whole, frac := q/4, q%4
	if frac == 0 {
		return strconv.FormatInt(whole, 10) + suffix
	}
	return strconv.FormatInt(whole, 10) + []string{"", ".25", ".5", ".75"}[frac] + suffix
}
