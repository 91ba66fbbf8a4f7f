package queue

import (
	"fmt"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// benchAdm answers Wait to every class but admit, without bookkeeping, so
// the benchmark measures the queue.
type benchAdm struct {
	admit string
	asked int
}

func (a *benchAdm) Refresh() {}
func (a *benchAdm) Reserve(e governor.Estimate) (governor.Decision, Reservation, bool) {
	a.asked++
	if e.Class == a.admit {
		return governor.Decision{Verdict: governor.Admit, Reason: governor.ReasonFits, Batch: e.BatchMax, Threads: e.Threads},
			fakeRes{1, governor.Contract{Batch: e.BatchMax, Threads: e.Threads}}, true
	}
	return governor.Decision{Verdict: governor.Wait, Reason: governor.ReasonInsufficientMemory, Budget: governor.BudgetMemory,
		Need: 4 << 30, Free: 2 << 30, Batch: e.BatchMin, Threads: e.Threads}, nil, false
}
func (a *benchAdm) Release(Reservation) error { return nil }
func (a *benchAdm) Changed() <-chan struct{}  { return nil }
func (o *countingObserver) Observe(Event)     { o.n++ }
func (q *Queue) benchRequeue(e *entry)        { q.mu.Lock(); defer q.mu.Unlock(); q.lockedRequeue(e) }
func newBenchQueue(adm Admitter, obs Observer, admitted **entry) *Queue {
	q := New(Config{}, adm, nil, obs)
	q.spawn = func(e *entry) { *admitted = e }
	return q
}

type countingObserver struct{ n int }

// lockedRequeue puts an admitted entry back in the dispatch list, as if its
// worker had given it back. REQUIRES: q.mu held. Benchmark only.
func (q *Queue) lockedRequeue(e *entry) {
	e.state = statePending
	e.hasRes, e.contract = false, nil
	e.phase = v1alpha1.PhasePending
	q.mu.active--
	q.workers.Done()
	q.lockedEnqueue(e, e.task.Seq)
}

// BenchmarkScan is one scan-and-dispatch over n pending tasks where every
// task but the last is told Wait, and the last one is admitted and handed
// to a worker. In pending=N every task asks its own question (the
// governor is asked n times: a pass's memo must cost next to nothing when
// nothing repeats); in pending=N,same the n-1 waiting tasks ask the same
// one (asked twice: the memo answers the rest).
func BenchmarkScan(b *testing.B) {
	for _, c := range []struct {
		n    int
		same bool
	}{{100, false}, {1000, false}, {10000, false}, {10000, true}} {
		n, name := c.n, fmt.Sprintf("pending=%d", c.n)
		if c.same {
			name += ",same"
		}
		b.Run(name, func(b *testing.B) {
			last := fmt.Sprintf("t%06d", n-1)
			adm := &benchAdm{admit: last}
			obs := &countingObserver{}
			var admitted *entry
			q := newBenchQueue(adm, obs, &admitted)
			for i := range n {
				t := mkTask(fmt.Sprintf("t%06d", i), int64(i), 100, 10)
				if c.same && t.Name != last {
					t.Estimate.Class = "same"
				}
				if err := q.Upsert(t); err != nil {
					b.Fatal(err)
				}
			}
			q.scanOnce() // the first scan reports every Wait once
			if admitted == nil {
				b.Fatal("last task not admitted")
			}
			q.benchRequeue(admitted)
			adm.asked, obs.n = 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				admitted = nil
				q.scanOnce()
				if admitted == nil {
					b.Fatal("last task not admitted")
				}
				b.StopTimer()
				q.benchRequeue(admitted)
				b.StartTimer()
			}
			b.StopTimer()
			asked := n
			if c.same {
				asked = 2
			}
			if adm.asked != asked*b.N {
				b.Fatalf("governor asked %d times, want %d", adm.asked, asked*b.N)
			}
			// Only the admitted task's Reserved event, and its waiting
			// event after each requeue: unchanged Waits emit nothing.
			if obs.n > 2*b.N {
				b.Fatalf("%d events for %d scans: unchanged waits were re-emitted", obs.n, b.N)
			}
		})
	}
}

// BenchmarkScanParked is a pass over n pending tasks that ask the same
// question and were told to wait by a pass before, nothing changed since
// (the passes a flood makes between two admissions): the parked run
// (waitRun) is left as it is.
func BenchmarkScanParked(b *testing.B) {
	const n = 10000
	adm := &benchAdm{admit: "none"}
	var admitted *entry
	q := newBenchQueue(adm, &countingObserver{}, &admitted)
	for i := range n {
		t := mkTask(fmt.Sprintf("t%06d", i), int64(i), 100, 10)
		t.Estimate.Class = "same"
		if err := q.Upsert(t); err != nil {
			b.Fatal(err)
		}
	}
	q.scanOnce() // the whole list: parked
	adm.asked = 0
	b.ReportAllocs()
	for b.Loop() {
		q.scanOnce()
	}
	if admitted != nil {
		b.Fatalf("%s admitted", admitted.task.Name)
	}
	if adm.asked > b.N {
		b.Fatalf("governor asked %d times in %d passes, want once each", adm.asked, b.N)
	}
}

// BenchmarkScanFair is a pass over n pending tasks of three accounts
// (the fair order: no parked run), all asking the same question and told
// to wait: what a flood of several owners costs each pass.
func BenchmarkScanFair(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			adm := &benchAdm{admit: "none"}
			var admitted *entry
			q := newBenchQueue(adm, &countingObserver{}, &admitted)
			for i := range n {
				t := mkTask(fmt.Sprintf("t%06d", i), int64(i), 100, 10)
				t.Estimate.Class = "same"
				t.Account = []string{"alice", "bob", "carol"}[i%3]
				if err := q.Upsert(t); err != nil {
					b.Fatal(err)
				}
			}
			q.scanOnce()
			b.ReportAllocs()
			for b.Loop() {
				q.scanOnce()
			}
			if admitted != nil {
				b.Fatalf("%s admitted", admitted.task.Name)
			}
		})
	}
}
