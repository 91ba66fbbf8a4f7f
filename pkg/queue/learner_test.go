package queue

import (
	"strings"
	"sync"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// fakeLearner raises a task's fixed cost by 10 per kill and counts calls.
type fakeLearner struct {
	mu        sync.Mutex
	observed  []BatchResult
	estimates map[string]int
	// never makes every estimate ask more than any budget.
	never bool
	// lastKills is the kills of the last Estimate.
	lastKills Kills
}

var _ Learner = (*fakeLearner)(nil)

func (l *fakeLearner) Observe(t *Task, b Batch, res BatchResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.observed = append(l.observed, res)
}

func (l *fakeLearner) Estimate(t *Task, kills Kills) governor.Estimate {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.estimates == nil {
		l.estimates = map[string]int{}
	}
	l.estimates[t.Name]++
	l.lastKills = kills
	e := t.Estimate
	e.FixedMemory += int64(10 * kills.Memory)
	if l.never {
		e.FixedMemory = 1 << 40
	}
	return e
}

func (l *fakeLearner) calls(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.estimates[name]
}

var memKill = BatchResult{ExitCode: -1, Reason: v1alpha1.ReasonMemoryExceeded, Message: "peak 9 > 8"}

var gpuKill = BatchResult{ExitCode: -1, Reason: v1alpha1.ReasonGPUMemoryExceeded, Message: "GPU memory 9 > 8"}

// A batch killed for GPU memory takes the memory kill's paths, counted
// apart: a learning task retries the whole batch under the Learner's
// estimate, told it was the GPU memory; a strict one halves, and fails at
// batch.min with GPUMemoryExceeded.
func TestGPUMemoryKill(t *testing.T) {
	t.Run("learning", func(t *testing.T) {
		l := &fakeLearner{}
		a := mkTask("a", 1, 8, 8)
		a.Mode = v1alpha1.EstimateLearned
		h := newHarnessWith(t, Config{}, 1000, nil, []Option{WithLearner(l)}, a)
		h.run.nth(t, "a", 0).finish(gpuKill)
		fb := h.run.nth(t, "a", 1)
		if fb.b.Size != 8 || fb.b.Start != 0 || fb.b.Attempt != 2 {
			t.Errorf("retry after a GPU memory kill: %+v, want the whole batch again", fb.b)
		}
		l.mu.Lock()
		if want := (Kills{GPUMemory: 1}); l.lastKills != want {
			t.Errorf("learner asked with %+v, want %+v", l.lastKills, want)
		}
		l.mu.Unlock()
		fb.ok()
		h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
	})
	t.Run("strict", func(t *testing.T) {
		a := mkTask("a", 1, 8, 8)
		a.Mode = v1alpha1.EstimateStrict
		h := newHarnessWith(t, Config{}, 1000, nil, nil, a)
		h.run.nth(t, "a", 0).finish(gpuKill)
		fb := h.run.nth(t, "a", 1)
		if fb.b.Size != 4 {
			t.Fatalf("strict after a GPU memory kill: size %d, want halved to 4", fb.b.Size)
		}
		fb.finish(gpuKill)
		h.run.nth(t, "a", 2).finish(gpuKill)
		h.run.nth(t, "a", 3).finish(gpuKill)
		ev := h.obs.waitPhase(t, "a", v1alpha1.PhaseFailed)
		if ev.Reason != v1alpha1.ReasonGPUMemoryExceeded || !strings.Contains(ev.Message, "exceeded its GPU memory at batch.min") {
			t.Errorf("ended %q %q", ev.Reason, ev.Message)
		}
	})
}

// A learning task killed for memory is retried whole under the Learner's
// revised estimate: same batch, same size, a larger contract.
func TestKillOfALearningTaskRetriesUnderTheLearnedNeed(t *testing.T) {
	for _, mode := range []v1alpha1.EstimateMode{v1alpha1.EstimateLearned, v1alpha1.EstimateDeclared} {
		t.Run(string(mode), func(t *testing.T) {
			l := &fakeLearner{}
			a := mkTask("a", 1, 8, 8)
			a.Mode = mode
			h := newHarnessWith(t, Config{}, 1000, nil, []Option{WithLearner(l)}, a)
			first := h.run.nth(t, "a", 0)
			if l.calls("a") == 0 {
				t.Errorf("a %s task did not ask the learner", mode)
			}
			first.finish(memKill)
			fb := h.run.nth(t, "a", 1)
			if fb.b.Size != 8 || fb.b.Start != 0 || fb.b.Attempt != 2 {
				t.Errorf("retry after a kill: %+v, want the whole batch again", fb.b)
			}
			if got, want := fb.b.Contract.MemoryBytes, first.b.Contract.MemoryBytes+10; got != want {
				t.Errorf("retry contract %d bytes, want the learned %d", got, want)
			}
			fb.ok()
			h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
			l.mu.Lock()
			defer l.mu.Unlock()
			if len(l.observed) != 2 || l.observed[0].Reason != v1alpha1.ReasonMemoryExceeded {
				t.Errorf("observed %+v, want the kill then the success", l.observed)
			}
		})
	}
}

// strict keeps the fail-fast rule even with a Learner.
func TestStrictTaskStillHalves(t *testing.T) {
	l := &fakeLearner{}
	a := mkTask("a", 1, 8, 8)
	a.Mode = v1alpha1.EstimateStrict
	h := newHarnessWith(t, Config{}, 1000, nil, []Option{WithLearner(l)}, a)
	h.run.nth(t, "a", 0).finish(memKill)
	if fb := h.run.nth(t, "a", 1); fb.b.Size != 4 {
		t.Errorf("strict after a kill: size %d, want halved to 4", fb.b.Size)
	}
	if n := l.calls("a"); n != 0 {
		t.Errorf("a strict task asked the learner %d times", n)
	}
}

// decidingAdm is the fake admitter answering Decide too.
type decidingAdm struct{ *fakeAdm }

func (a decidingAdm) Decide(e governor.Estimate) governor.Decision {
	if need(e, e.BatchMin) > a.budget {
		return governor.Decision{Verdict: governor.Reject, Reason: governor.ReasonExceedsCapacity, Budget: governor.BudgetMemory, Need: need(e, e.BatchMin), Free: a.budget}
	}
	return governor.Decision{Verdict: governor.Admit, Reason: governor.ReasonFits}
}

// A learned need the machine can never grant fails the task at once
// (Failed, MemoryExceeded, with the governor's words); without a Decider
// the sequence break's Reserve rejects it.
func TestKillWithANeedBeyondTheMachine(t *testing.T) {
	for _, deciding := range []bool{true, false} {
		l := &fakeLearner{}
		a := mkTask("a", 1, 8, 8)
		a.Mode = v1alpha1.EstimateDeclared
		var wrap func(*fakeAdm) Admitter
		if deciding {
			wrap = func(a *fakeAdm) Admitter { return decidingAdm{a} }
		}
		h := newHarnessWith(t, Config{}, 1000, wrap, []Option{WithLearner(l)}, a)
		first := h.run.nth(t, "a", 0)
		l.mu.Lock()
		l.never = true
		l.mu.Unlock()
		first.finish(memKill)
		if deciding {
			ev := h.obs.waitPhase(t, "a", v1alpha1.PhaseFailed)
			if ev.Reason != v1alpha1.ReasonMemoryExceeded || !strings.Contains(ev.Message, "cannot be granted") {
				t.Errorf("ended %q %q", ev.Reason, ev.Message)
			}
		} else {
			ev := h.obs.waitPhase(t, "a", v1alpha1.PhaseRejected)
			if ev.Reason != string(governor.ReasonExceedsCapacity) {
				t.Errorf("ended %q %q", ev.Reason, ev.Message)
			}
		}
	}
}
