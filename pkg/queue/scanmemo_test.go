package queue

import (
	"fmt"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// Fifty identical tasks, one fitting at a time: every one of them still
// runs, in FIFO order, and a scan asks the admitter and the Learner about
// the identical pending tasks once (plus once after a grant), not once per
// task: a flood of small tasks is not a quadratic number of decisions.
func TestScanAsksOncePerDistinctQuestion(t *testing.T) {
	const n = 50
	var tasks []Task
	for i := range n {
		tasks = append(tasks, Task{
			Name: fmt.Sprintf("t%02d", i), Seq: int64(i + 1), ItemsTotal: 1, Mode: v1alpha1.EstimateLearned, Profile: "flood",
			Estimate: governor.Estimate{Class: "flood", PerItemMemory: 60, BatchMin: 1, BatchMax: 1, Threads: 1, MinThreads: 1},
		})
	}
	l := &fakeLearner{}
	h := newHarnessWith(t, Config{}, 100, nil, []Option{WithLearner(l)}, tasks...)
	for i := range n {
		fb := h.run.nth(t, fmt.Sprintf("t%02d", i), 0)
		h.run.mu.Lock()
		got := len(h.run.batches)
		h.run.mu.Unlock()
		if got != i+1 {
			t.Fatalf("%d batches started while t%02d runs alone", got, i)
		}
		fb.ok()
	}
	for i := range n {
		h.obs.waitPhase(t, fmt.Sprintf("t%02d", i), v1alpha1.PhaseDone)
	}
	h.adm.mu.Lock()
	reserves, scans := len(h.adm.reserveCalls), h.adm.refreshes
	h.adm.mu.Unlock()
	l.mu.Lock()
	var estimates int
	for _, c := range l.estimates {
		estimates += c
	}
	l.mu.Unlock()
	t.Logf("%d scans, %d Reserve calls, %d Learner estimates for %d tasks", scans, reserves, estimates, n)
	// At most a grant and a Wait per scan; without the memo each scan
	// asked about every pending task (about n²/2 in all).
	if reserves > 2*scans+n || estimates > 2*scans+n {
		t.Errorf("%d Reserve calls and %d estimates over %d scans: want at most two per scan", reserves, estimates, scans)
	}
}

// A pass remembers at most passMemoMax Wait answers, and once it holds
// that many the questions are taken as not repeating: the rest of the
// pass asks the governor every time. Eight questions asked five times
// over, in turn, are asked once each; 40 distinct ones, then the same
// again, are all asked twice.
func TestScanMemoIsBounded(t *testing.T) {
	for _, c := range []struct {
		distinct, rounds, asked int
	}{{8, 5, 8}, {40, 2, 80}} {
		adm := &benchAdm{admit: "none"}
		var admitted *entry
		q := newBenchQueue(adm, &countingObserver{}, &admitted)
		for i := range c.distinct * c.rounds {
			task := mkTask(fmt.Sprintf("t%03d", i), int64(i), 10, 1+int64(i%c.distinct))
			task.Estimate.Class = fmt.Sprintf("c%02d", i%c.distinct)
			if err := q.Upsert(task); err != nil {
				t.Fatal(err)
			}
		}
		q.scanOnce()
		if adm.asked != c.asked {
			t.Errorf("%d questions %d times over: the governor asked %d times, want %d (at most %d remembered)", c.distinct, c.rounds, adm.asked, c.asked, passMemoMax)
		}
		if admitted != nil {
			t.Fatalf("%s admitted", admitted.task.Name)
		}
		for _, st := range q.Snapshot() {
			if st.Phase != v1alpha1.PhasePending || st.Reason != string(governor.ReasonInsufficientMemory) {
				t.Errorf("%s: %s %s, want Pending %s", st.Name, st.Phase, st.Reason, governor.ReasonInsufficientMemory)
			}
		}
	}
}
