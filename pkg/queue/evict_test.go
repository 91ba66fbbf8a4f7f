package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// An evicted batch is not a failure: the task, with no retry left, goes
// back to Pending released, runs the same items again after the backoff,
// in a batch of the same size (strict: not halved; learning: the Learner
// counts no kill), and ends Done.
func TestEvictionSpendsNoRetryNorRaisesNorHalves(t *testing.T) {
	for _, mode := range []v1alpha1.EstimateMode{v1alpha1.EstimateStrict, v1alpha1.EstimateLearned} {
		t.Run(string(mode), func(t *testing.T) {
			l := &fakeLearner{}
			a := mkTask("a", 1, 8, 8)
			a.Retries = 0
			a.Mode = mode
			h := newHarnessWith(t, Config{RetryBackoff: time.Second}, 1000, nil, []Option{WithLearner(l)}, a)
			fb := h.run.nth(t, "a", 0)
			if h.q.Evict("a", 1, v1alpha1.ReasonEvicted, "wrong batch") || h.q.Evict("nope", 0, v1alpha1.ReasonEvicted, "no task") {
				t.Fatal("Evict took a batch that is not running")
			}
			// The batch is running for Evict once the worker holds it (just
			// after Start returns): the evictor asks again at each probe, so
			// does this test, for at most 10 s.
			for deadline := time.Now().Add(10 * time.Second); !h.q.Evict("a", 0, v1alpha1.ReasonEvicted, "batch 0 yielded to memory pressure"); {
				if time.Now().After(deadline) {
					t.Fatal("Evict refused the running batch")
				}
				time.Sleep(time.Millisecond)
			}
			p := h.obs.waitEvent(t, "Pending Evicted", func(e Event) bool {
				return e.Task == "a" && e.Type == EventPhase && e.Phase == v1alpha1.PhasePending && e.Reason == v1alpha1.ReasonEvicted
			})
			if !strings.Contains(p.Message, "batch 0 yielded to memory pressure") || !strings.Contains(p.Message, "admitted again in 1s") {
				t.Errorf("Pending message %q", p.Message)
			}
			if _, _, cancels := fb.counts(); cancels != 1 {
				t.Errorf("the evicted batch was cancelled %d times, want 1", cancels)
			}
			ended := h.obs.waitEvent(t, "the evicted batch's end", func(e Event) bool { return e.Task == "a" && e.Type == EventBatchEnded })
			if ended.Result.Reason != v1alpha1.ReasonEvicted {
				t.Errorf("batch ended with reason %q, want Evicted", ended.Result.Reason)
			}
			h.adm.mu.Lock()
			held := h.adm.grants - h.adm.releases
			h.adm.mu.Unlock()
			if held != 0 {
				t.Errorf("%d reservations held while evicted", held)
			}
			h.clk.Step(999 * time.Millisecond)
			if !h.clk.HasWaiters() {
				t.Fatal("admitted again before the backoff")
			}
			h.clk.Step(time.Millisecond)
			again := h.run.nth(t, "a", 1)
			if again.b.Index != 0 || again.b.Start != 0 || again.b.Size != 8 {
				t.Errorf("after the eviction: batch %+v, want batch 0 again, items 0..7", again.b)
			}
			again.ok()
			h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.lastKills != (Kills{}) {
				t.Errorf("the learner was told of kills %+v", l.lastKills)
			}
			if len(l.observed) != 2 || l.observed[0].Reason != v1alpha1.ReasonEvicted {
				t.Errorf("observed %+v, want the eviction then the success", l.observed)
			}
		})
	}
}

// A batch that ended before the eviction reached it keeps its result, and
// an eviction asked between batches takes nothing.
func TestEvictionOfAnEndedBatchTakesNothing(t *testing.T) {
	h := newHarness(t, Config{}, 100, mkTask("a", 1, 8, 4))
	h.run.nth(t, "a", 0).ok()
	h.obs.waitEvent(t, "batch 0 ended", func(e Event) bool { return e.Task == "a" && e.Type == EventBatchEnded })
	if h.q.Evict("a", 0, v1alpha1.ReasonEvicted, "late") {
		t.Error("Evict took a batch that ended")
	}
	h.run.nth(t, "a", 1).ok()
	h.obs.waitPhase(t, "a", v1alpha1.PhaseDone)
	for _, e := range h.obs.of("a") {
		if e.Reason == v1alpha1.ReasonEvicted {
			t.Errorf("event %+v names an eviction", e)
		}
	}
}
