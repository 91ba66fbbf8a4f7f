package reconcile

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// phaseSpool records the phase of every status write per manifest.
type phaseSpool struct {
	Spool
	mu     sync.Mutex
	phases map[string][]v1alpha1.Phase
}

func (s *phaseSpool) WriteStatus(path string, st *v1alpha1.TaskStatus) error {
	s.mu.Lock()
	s.phases[path] = append(s.phases[path], st.Phase)
	s.mu.Unlock()
	return s.Spool.WriteStatus(path, st)
}

func (s *phaseSpool) written(path string) []v1alpha1.Phase {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]v1alpha1.Phase(nil), s.phases[path]...)
}

// oneItem is a manifest of one item running command (a YAML flow list's
// elements).
func oneItem(name, command string) string {
	return "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: " + name + "}\nspec:\n  command: [" + command + "]\n  items: {count: 1}\n"
}

// TestShortTasksDroppedAtOnceAreNotWrittenQueued: thirty short tasks
// dropped at once, two at a time, each waiting for a worker (MaxParallel)
// or, without a cap, for a CPU thread of the machine's two (NoFreeCPU):
// none is written as merely queued (Pending) before it starts, since each
// starts within QueuedWriteDelay; each is written with its phase changes
// only.
func TestShortTasksDroppedAtOnceAreNotWrittenQueued(t *testing.T) {
	t.Run("max-parallel", func(t *testing.T) { testShortTasksNotWrittenQueued(t, queue.Config{MaxParallel: 2}) })
	t.Run("cpu-threads", func(t *testing.T) { testShortTasksNotWrittenQueued(t, queue.Config{}) })
}

func testShortTasksNotWrittenQueued(t *testing.T, qcfg queue.Config) {
	h := newHarness(t, Config{ExitWhenDone: true, QueuedWriteDelay: time.Minute, Queue: qcfg})
	rec := &phaseSpool{phases: map[string][]v1alpha1.Phase{}}
	h.wrap = func(s Spool) Spool { rec.Spool = s; return rec }
	var files []string
	for i := range 30 {
		name := fmt.Sprintf("t%02d", i)
		h.write(name+".yaml", oneItem(name, `"true"`))
		files = append(files, name+".yaml")
	}
	h.start()
	h.wait()
	for _, p := range files {
		got := rec.written(filepath.Join(h.dir, p))
		if len(got) == 0 || got[len(got)-1] != v1alpha1.PhaseDone {
			t.Errorf("%s: writes %v, want Done last", p, got)
		}
		for _, ph := range got {
			if ph == v1alpha1.PhasePending {
				t.Errorf("%s: written as Pending before it started (writes %v)", p, got)
				break
			}
		}
		if st := h.status(p); st.QueueSeq == 0 || st.Phase != v1alpha1.PhaseDone {
			t.Errorf("%s: status phase %s queueSeq %d, want Done with its queue position", p, st.Phase, st.QueueSeq)
		}
	}
}

// TestQueuedTaskIsWrittenAfterTheDelay: a task that waits for a worker
// longer than QueuedWriteDelay gets its Pending status (queue position,
// why it waits) written once the delay is over, while it still waits.
//
// With a slow first probe, both tasks first wait for the machine's
// snapshot (the controller's first moments, or CI's slow machines): that
// wait does not make b's first write urgent either.
func TestQueuedTaskIsWrittenAfterTheDelay(t *testing.T) {
	for _, probe := range []struct {
		name  string
		first time.Duration
	}{{"fast probe", 0}, {"slow first probe", 100 * time.Millisecond}} {
		t.Run(probe.name, func(t *testing.T) { queuedWrittenAfterTheDelay(t, probe.first) })
	}
}

func queuedWrittenAfterTheDelay(t *testing.T, firstProbe time.Duration) {
	h := newHarness(t, Config{QueuedWriteDelay: 300 * time.Millisecond, Queue: queue.Config{MaxParallel: 1}})
	var probed sync.Once
	h.snapshot = func() (governor.Snapshot, error) {
		probed.Do(func() { time.Sleep(firstProbe) })
		return fixedMachine(), nil
	}
	rec := &phaseSpool{phases: map[string][]v1alpha1.Phase{}}
	h.wrap = func(s Spool) Spool { rec.Spool = s; return rec }
	long, queued := "a.yaml", "b.yaml"
	h.write(long, oneItem("a", `sleep, "30"`))
	h.write(queued, oneItem("b", `"true"`))
	started := time.Now()
	h.start()
	h.eventually("a running", func() bool { return h.status(long).Phase == v1alpha1.PhaseRunning })
	h.eventually("b written as Pending", func() bool {
		st := h.status(queued)
		return st.Phase == v1alpha1.PhasePending && st.QueueSeq > 0
	})
	if took := time.Since(started); took < 300*time.Millisecond {
		t.Errorf("b's Pending status written %v after start, before QueuedWriteDelay", took)
	}
	if got := rec.written(filepath.Join(h.dir, queued)); len(got) != 1 || got[0] != v1alpha1.PhasePending {
		t.Errorf("b written %v, want one Pending write", got)
	}
	if h.status(long).Phase != v1alpha1.PhaseRunning {
		t.Error("a no longer runs: b's write did not happen while it waited")
	}
}
