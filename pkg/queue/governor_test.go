package queue

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// govAdmitter is the real governor behind the queue's Admitter, refreshed
// with a fixed snapshot (the probe's job in the controller).
type govAdmitter struct {
	*governor.Governor
	snap governor.Snapshot
}

func (a govAdmitter) Refresh() { a.Update(a.snap) }

func (a govAdmitter) Reserve(e governor.Estimate) (governor.Decision, Reservation, bool) {
	d, r, ok := a.Governor.Reserve(e)
	if !ok {
		return d, nil, false
	}
	return d, r, true
}

func (a govAdmitter) Release(r Reservation) error {
	return a.Governor.Release(r.(governor.Reservation))
}

var _ Admitter = govAdmitter{}

// realGovernorQueue is a queue over the fake runner and a real governor
// of capacity bytes, on an 8 GiB, 8-CPU machine, no margin nor gate.
func realGovernorQueue(capacity int64) (*Queue, *governor.Governor, *fakeRunner, *recorder) {
	g := governor.New(governor.Config{MemoryCapacity: capacity, MemoryReserved: -1, CPUsReserved: -1,
		LoadThreshold: -1, IOPressureThreshold: -1, IOSlots: -1})
	adm := govAdmitter{g, governor.Snapshot{MemTotal: 8 << 30, MemAvailable: 8 << 30, CPUs: 8}}
	run, obs := &fakeRunner{}, &recorder{}
	return New(Config{}, adm, run, obs), g, run, obs
}

// TestWithRealGovernor runs tasks that cannot all fit at once through the
// real governor: every batch starts under the task's own active
// reservation, reservations never exceed the RAM budget, and at the end
// none is left.
func TestWithRealGovernor(t *testing.T) {
	const mi = 1 << 20
	q, g, run, obs := realGovernorQueue(1024 * mi)

	var mu sync.Mutex
	var bad []string
	maxRes := 0
	finish := make(chan *fakeBatch, 1024)
	run.onStart = func(fb *fakeBatch) { // r.mu held; lock order r.mu → q.mu → governor
		q.mu.Lock()
		e := q.mu.tasks[fb.b.Task]
		ok := e != nil && e.hasRes && g.Active(e.res.(governor.Reservation)) && e.res.Contract() == fb.b.Contract
		q.mu.Unlock()
		b := g.Budgets()
		mu.Lock()
		if !ok {
			bad = append(bad, fmt.Sprintf("%s batch %d started without its active reservation", fb.b.Task, fb.b.Index))
		}
		if b.Memory.Reserved > b.Memory.Capacity-b.Memory.Margin {
			bad = append(bad, fmt.Sprintf("reserved %d > capacity %d - margin %d", b.Memory.Reserved, b.Memory.Capacity, b.Memory.Margin))
		}
		maxRes = max(maxRes, b.Reservations)
		mu.Unlock()
		finish <- fb
	}
	names := []string{"a", "b", "c", "d", "e", "f"}
	for i, n := range names {
		tk := Task{Name: n, Seq: int64(i), ItemsTotal: 8, Estimate: governor.Estimate{
			Class: "features", PerItemMemory: 100 * mi, FixedMemory: 10 * mi,
			BatchMin: 1, BatchMax: 4, Threads: 1, MinThreads: 1}}
		if err := q.Upsert(tk); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- q.Run(ctx) }()
	go func() {
		for fb := range finish {
			fb.ok()
		}
	}()
	for _, n := range names {
		obs.waitPhase(t, n, v1alpha1.PhaseDone)
	}
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-runDone
	close(finish)
	mu.Lock()
	defer mu.Unlock()
	for _, s := range bad {
		t.Error(s)
	}
	if b := g.Budgets(); b.Reservations != 0 || b.Memory.Reserved != 0 {
		t.Errorf("after close: %d reservations, %d bytes reserved", b.Reservations, b.Memory.Reserved)
	}
	if maxRes < 2 {
		t.Errorf("at most %d reservation at once: tasks did not run side by side", maxRes)
	}
	for _, n := range names {
		if st := stateOf(q, n); st.ItemsDone != 8 {
			t.Errorf("%s: %d items done", n, st.ItemsDone)
		}
	}
}

// TestTailsAreEvenedOutWithRealGovernor: a task of 64 items of which 62
// fit runs as two batches of 32 (not 62 + 2), and one of 64 items with
// batch.max 30 as 22 + 21 + 21 (evened again at each boundary), through
// the real governor: the queue tells it the items left.
func TestTailsAreEvenedOutWithRealGovernor(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name     string
		capacity int64
		batchMax int64
		want     []int64
	}{
		{"memory fits 62 of 64", 10*mi + 62*mi, 64, []int64{32, 32}},
		{"batch.max 30 of 64", 1024 * mi, 30, []int64{22, 21, 21}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, _, run, obs := realGovernorQueue(tc.capacity)
			var mu sync.Mutex
			var sizes []int64
			run.onStart = func(fb *fakeBatch) {
				mu.Lock()
				sizes = append(sizes, fb.b.Size)
				mu.Unlock()
				go fb.ok()
			}
			if err := q.Upsert(Task{Name: "a", ItemsTotal: 64, Estimate: governor.Estimate{
				Class: "features", PerItemMemory: mi, FixedMemory: 10 * mi,
				BatchMin: 1, BatchMax: tc.batchMax, Threads: 1, MinThreads: 1}}); err != nil {
				t.Fatal(err)
			}
			runUntilDone(t, q, obs, "a")
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(sizes, tc.want) {
				t.Errorf("batches %v, want %v", sizes, tc.want)
			}
		})
	}
}

// TestReadyPeersShareTheMemory: the first batch of a task is held to its
// share of the memory as long as another task could run beside it. Only
// the tasks ready to run count: one paused, one waiting for a dependency
// and one beyond --max-parallel do not; --batch-policy largest holds no
// batch to a share.
func TestReadyPeersShareTheMemory(t *testing.T) {
	const mi = 1 << 20
	task := func(name string, f func(*Task)) Task {
		tk := Task{Name: name, ItemsTotal: 64, Estimate: governor.Estimate{
			Class: "features", PerItemMemory: 10 * mi, FixedMemory: 10 * mi,
			BatchMin: 1, BatchMax: 64, Threads: 1, MinThreads: 1}}
		if f != nil {
			f(&tk)
		}
		return tk
	}
	paused := func(tk *Task) { tk.Paused = true }
	after := func(tk *Task) { tk.DependsOn = []string{"a"} }
	for _, tc := range []struct {
		name        string
		maxParallel int
		largest     bool
		tasks       []Task
		batch       int64
		share       int
	}{
		// 1024MiB: the whole task (650MiB) would leave the other less than half.
		{"two ready", 0, false, []Task{task("a", nil), task("b", nil)}, 32, 2},
		{"alone", 0, false, []Task{task("a", nil)}, 64, 0},
		{"the other paused or waiting for a", 0, false, []Task{task("a", nil), task("b", paused), task("c", after)}, 64, 0},
		{"max-parallel 1", 1, false, []Task{task("a", nil), task("b", nil)}, 64, 0},
		{"four ready", 0, false, []Task{task("a", nil), task("b", nil), task("c", nil), task("d", nil)}, 22, 4},
		{"--batch-policy largest", 0, true, []Task{task("a", nil), task("b", nil)}, 64, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := governor.New(governor.Config{MemoryCapacity: 1024 * mi, MemoryReserved: -1, CPUsReserved: -1,
				LoadThreshold: -1, IOPressureThreshold: -1, IOSlots: -1})
			adm := govAdmitter{g, governor.Snapshot{MemTotal: 8 << 30, MemAvailable: 8 << 30, CPUs: 8}}
			run, obs := &fakeRunner{}, &recorder{}
			q := New(Config{MaxParallel: tc.maxParallel, LargestBatches: tc.largest}, adm, run, obs)
			var mu sync.Mutex
			first := map[string]governor.Contract{}
			run.onStart = func(fb *fakeBatch) {
				mu.Lock()
				if _, ok := first[fb.b.Task]; !ok {
					first[fb.b.Task] = fb.b.Contract
				}
				mu.Unlock()
				go fb.ok()
			}
			for _, tk := range tc.tasks {
				if err := q.Upsert(tk); err != nil {
					t.Fatal(err)
				}
			}
			runUntilDone(t, q, obs, "a")
			mu.Lock()
			defer mu.Unlock()
			if c := first["a"]; c.Batch != tc.batch || c.Share != tc.share {
				t.Errorf("a's first batch %d at a share of %d, want %d at %d", c.Batch, c.Share, tc.batch, tc.share)
			}
		})
	}
}

// runUntilDone runs q until the task name is Done, then closes it.
func runUntilDone(t *testing.T, q *Queue, obs *recorder, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- q.Run(ctx) }()
	obs.waitPhase(t, name, v1alpha1.PhaseDone)
	if err := q.Close(ctx); err != nil {
		t.Fatal(err)
	}
	<-runDone
}
