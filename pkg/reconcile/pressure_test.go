package reconcile

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// A batch evicted at its full contract is recorded (batches lists it) but
// is no evidence about its memory: the declared estimate stands, where
// the same batch killed for memory raises it.
func TestEvictionNeitherRaisesNorRefutesTheEstimate(t *testing.T) {
	run := func(reason string) (governor.Estimate, *learner) {
		l := newTestLearner(64 << 30)
		tk := learnTask(v1alpha1.EstimateDeclared, 100*mi, 10*mi)
		limit := int64(100*mi + 10*mi*8)
		res := queue.BatchResult{ExitCode: -1, Reason: reason, PeakMemoryBytes: limit + limit/10, PeakWorkingSetBytes: limit + limit/10,
			Started: time.Unix(0, 0), Ended: time.Unix(5, 0)}
		l.Observe(tk, queue.Batch{Size: 8, Contract: governor.Contract{Threads: 1, MemoryBytes: limit}}, res)
		kills := queue.Kills{}
		if reason == v1alpha1.ReasonMemoryExceeded {
			kills.Memory = 1
		}
		return costsOf(l.Estimate(tk, kills)), l
	}
	declared := costsOf(learnTask(v1alpha1.EstimateDeclared, 100*mi, 10*mi).Estimate)
	e, l := run(v1alpha1.ReasonEvicted)
	if e != declared {
		t.Errorf("after an eviction: %+v, want the declaration %+v", e, declared)
	}
	m := l.book.Model("custom/synth")
	if m.Censored != 0 || m.Samples != 0 || m.Total != 1 {
		t.Errorf("model after an eviction: censored %d, samples %d, total %d; want it recorded as neither", m.Censored, m.Samples, m.Total)
	}
	if killed, _ := run(v1alpha1.ReasonMemoryExceeded); killed == declared {
		t.Error("the same batch killed for memory left the estimate as declared: the test proves nothing")
	}
}

// The evictor's step: nothing below hard pressure; at hard pressure one
// eviction, of the rule's victim, naming what took the memory; none
// while it settles; the next once it is gone and evictSettle passed.
func TestEvictorEvictsOneBatchAtATime(t *testing.T) {
	gov := governor.New(governor.Config{MemoryReserved: governor.DefaultMinMemoryReserved})
	now := time.Unix(1_700_000_000, 0)
	snap := func(avail, batches int64) {
		gov.Update(governor.Snapshot{Taken: now, MemTotal: 8 << 30, MemAvailable: avail, CPUs: 4, WorkMemoryUsage: batches})
	}
	running := []evictCandidate{
		{queueName: "old", VictimCandidate: governor.VictimCandidate{Task: "old", Batch: 3, Started: now.Add(-time.Hour), Threads: 2, Reserved: 2 << 30, Used: 2 << 30}},
		{queueName: "1\x1fyoung", VictimCandidate: governor.VictimCandidate{Task: "young", Batch: 0, Started: now.Add(-time.Minute), Threads: 2, Reserved: 2 << 30, Used: 2 << 30}},
	}
	var asked []string
	v := &evictor{
		gov:        gov,
		candidates: func() []evictCandidate { return running },
		evict: func(task string, batch int64, reason, message string) bool {
			if reason != v1alpha1.ReasonEvicted || !strings.Contains(message, "largest: firefox (pid 7) 3.0GiB") {
				t.Errorf("evict %s %d %s %q", task, batch, reason, message)
			}
			asked = append(asked, task)
			return true
		},
		top: func() []string { return []string{"firefox (pid 7) 3.0GiB"} },
		log: zerolog.Nop(), now: func() time.Time { return now },
	}
	snap(3<<30, 4<<30)
	if got := v.step(); got != "" {
		t.Fatalf("no pressure: evicted %q", got)
	}
	snap(200<<20, 4<<30) // under the hard threshold (256 MiB)
	if got := v.step(); got != "1\x1fyoung" {
		t.Fatalf("hard pressure: evicted %q, want the youngest", got)
	}
	if got := v.step(); got != "" {
		t.Fatalf("while the victim still runs: evicted %q", got)
	}
	running = running[:1] // the victim is gone
	now = now.Add(evictSettle - time.Millisecond)
	if got := v.step(); got != "" {
		t.Fatalf("before evictSettle: evicted %q", got)
	}
	now = now.Add(time.Millisecond)
	if got := v.step(); got != "old" {
		t.Fatalf("still hard once settled: evicted %q, want old", got)
	}
	if len(asked) != 2 {
		t.Errorf("evictions asked: %v", asked)
	}
}
