package queue

import (
	"context"
	"sync"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// switchingAdmitter is the real governor behind the queue's Admitter,
// refreshed with a snapshot the test changes while the queue runs.
type switchingAdmitter struct {
	*governor.Governor
	mu   sync.Mutex
	snap governor.Snapshot
}

func (a *switchingAdmitter) set(s governor.Snapshot) {
	a.mu.Lock()
	a.snap = s
	a.mu.Unlock()
	a.Update(s)
}

func (a *switchingAdmitter) Refresh() {
	a.mu.Lock()
	s := a.snap
	a.mu.Unlock()
	a.Update(s)
}

func (a *switchingAdmitter) Reserve(e governor.Estimate) (governor.Decision, Reservation, bool) {
	d, r, ok := a.Governor.Reserve(e)
	if !ok {
		return d, nil, false
	}
	return d, r, true
}

func (a *switchingAdmitter) Release(r Reservation) error {
	return a.Governor.Release(r.(governor.Reservation))
}

var _ Admitter = (*switchingAdmitter)(nil)

// TestTheCPUGateNeverHoldsATaskBetweenItsBatches: the CPU gate defers new
// admissions only. A task admitted on a quiet machine runs all its
// batches while CPU pressure (and IO pressure, for a task holding an IO
// slot) stays above the threshold, the gate unbounded (no
// --cpu-gate-max-wait): each next batch is its work going on. A task
// that arrives meanwhile is a new admission and waits, CPUPressure.
func TestTheCPUGateNeverHoldsATaskBetweenItsBatches(t *testing.T) {
	const mi = 1 << 20
	quiet := governor.Snapshot{MemTotal: 8 << 30, MemAvailable: 8 << 30, CPUs: 8,
		PSI: governor.PSI{Available: true}}
	busy := quiet
	busy.PSI.CPU.SomeAvg10, busy.PSI.IO.SomeAvg10 = 95, 95
	g := governor.New(governor.Config{MemoryReserved: -1, CPUsReserved: -1, CPUGateMaxWait: -1})
	adm := &switchingAdmitter{Governor: g, snap: quiet}
	run, obs := &fakeRunner{}, &recorder{}
	q := New(Config{}, adm, run, obs)

	var mu sync.Mutex
	var sizes []int64
	late := Task{Name: "late", Seq: 2, ItemsTotal: 1, Estimate: governor.Estimate{
		Class: "features", FixedMemory: 10 * mi, BatchMin: 1, BatchMax: 1, Threads: 1, MinThreads: 1}}
	run.onStart = func(fb *fakeBatch) { // r.mu held
		mu.Lock()
		first := len(sizes) == 0
		sizes = append(sizes, fb.b.Size)
		mu.Unlock()
		if first {
			// The machine turns busy once the task's work is under way.
			adm.set(busy)
			go func() {
				if err := q.Upsert(late); err != nil {
					t.Error(err)
				}
				fb.ok()
			}()
			return
		}
		go fb.ok()
	}
	if err := q.Upsert(Task{Name: "a", Seq: 1, ItemsTotal: 4, Estimate: governor.Estimate{
		Class: "features", PerItemMemory: mi, FixedMemory: 10 * mi, IOSlots: 1,
		BatchMin: 1, BatchMax: 1, Threads: 1, MinThreads: 1}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- q.Run(ctx) }()
	obs.waitPhase(t, "a", v1alpha1.PhaseDone)
	ev := obs.waitEvent(t, "late waiting", func(e Event) bool { return e.Task == "late" && e.Type == EventWaiting })
	if ev.Reason != string(governor.ReasonCPUPressure) {
		t.Errorf("the task that arrived on the busy machine: %s %q, want CPUPressure", ev.Reason, ev.Message)
	}
	if st := stateOf(q, "late"); st.Phase == v1alpha1.PhaseDone || st.Phase == v1alpha1.PhaseRunning {
		t.Errorf("late admitted under CPU pressure: %s", st.Phase)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-runDone
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 4 {
		t.Errorf("a ran %d batches %v, want 4 of 1", len(sizes), sizes)
	}
}
