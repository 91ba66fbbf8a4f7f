package reconcile

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// switchable is a machine snapshot a test changes while the controller runs.
type switchable struct {
	mu   sync.Mutex
	snap governor.Snapshot
}

func (s *switchable) get() (governor.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.snap
	out.Taken = time.Now()
	out.GPUs = append([]governor.GPU(nil), s.snap.GPUs...)
	out.Scratch = append([]governor.ScratchVolume(nil), s.snap.Scratch...)
	return out, nil
}

func (s *switchable) set(f func(*governor.Snapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.snap)
}

// startWith starts the harness's controller with a snapshot function and,
// optionally, scratch leases and governor options.
func (h *harness) startWith(snap SnapshotFunc, leases *scratch.Leases, opts ...governor.Option) {
	h.t.Helper()
	h.snapshot, h.leases, h.govOpts = snap, leases, opts
	h.start()
}

// within fails the test when f does not return within the guard: a call
// blocked behind a probe.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked behind the probe", what)
	}
}

// TestABlockedProbeBlocksNeitherTheQueueNorTheReconciler: the probe (which
// may exec nvidia-smi for seconds) runs on the prober's goroutine only, with
// no lock of the queue or the controller held. While it is stuck, the
// queue's Upsert, SetPaused and Snapshot return, and the reconciler keeps
// writing statuses: a new task gets its Pending status (no snapshot yet:
// the governor says so) and a spec edit its new generation.
func TestABlockedProbeBlocksNeitherTheQueueNorTheReconciler(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	probe := func() (governor.Snapshot, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return fixedMachine(), nil
	}
	h := newHarness(t, Config{})
	t.Cleanup(func() { close(release) }) // runs before the harness's stop
	h.write("a.yaml", manifest("a", "true", ""))
	h.startWith(probe, nil)
	select {
	case <-entered:
	case <-time.After(guardTimeout):
		t.Fatal("the probe was never called")
	}
	h.eventually("a's Pending status written while the probe is stuck", func() bool {
		st := h.status("a.yaml")
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAdmitted)
		return st.Phase == v1alpha1.PhasePending && c != nil && c.Reason == string(governor.ReasonNoSnapshot)
	})
	q := h.ctrl.host.queue
	within(t, "Queue.Upsert", func() {
		if err := q.Upsert(queue.Task{Name: "direct", Seq: 100, ItemsTotal: 1, Generation: 1,
			Estimate: governor.Estimate{BatchMin: 1, BatchMax: 1, Threads: 1, MinThreads: 1}}); err != nil {
			t.Error(err)
		}
	})
	within(t, "Queue.SetPaused", func() {
		if err := q.SetPaused("direct", true); err != nil {
			t.Error(err)
		}
	})
	within(t, "Queue.Snapshot", func() {
		if n := len(q.Snapshot()); n != 2 {
			t.Errorf("Snapshot: %d tasks, want 2", n)
		}
	})
	h.write("a.yaml", manifest("a", "true", "  retries: 1\n"))
	h.eventually("the edit applied as generation 2 while the probe is stuck", func() bool {
		return h.status("a.yaml").ObservedGeneration == 2
	})
	select {
	case <-h.done:
		t.Fatal("the controller stopped")
	default:
	}
}

const guardTimeout = 10 * time.Second

// TestAHardwareRejectionIsOfferedAgainWhenTheGPUAppears: a GPU task on a
// machine without a GPU is Rejected (NoGPU); when a GPU appears (the
// governor's hardware generation changes), the same generation goes back to
// Pending by itself and runs to Done, its status cleared of the rejection.
// A task rejected for its spec (InvalidSpec) stays Rejected.
func TestAHardwareRejectionIsOfferedAgainWhenTheGPUAppears(t *testing.T) {
	m := &switchable{snap: fixedMachine()}
	h := newHarness(t, Config{})
	h.write("gpu.yaml", manifest("gpu", "true", "  resources: {gpuSlots: 1, fixed: {gpuMemory: 1Gi}}\n"))
	h.write("bad.yaml", manifest("bad", "true", "  resources: {batch: {min: 3, max: 2}}\n"))
	h.startWith(m.get, nil)
	h.eventually("gpu Rejected for NoGPU", func() bool {
		st := h.status("gpu.yaml")
		return st.Phase == v1alpha1.PhaseRejected && st.CompletionTime != nil &&
			hasCondition(st, v1alpha1.ConditionComplete, string(governor.ReasonNoGPU))
	})
	m.set(func(s *governor.Snapshot) {
		s.GPUs = []governor.GPU{{ID: "nvidia:0", Name: "Card", Known: true, TotalBytes: 8 * gi, FreeBytes: 8 * gi}}
	})
	h.eventually("gpu offered again and Done, same generation", func() bool {
		st := h.status("gpu.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.ObservedGeneration == 1 && st.Progress.ItemsDone == 4 &&
			hasCondition(st, v1alpha1.ConditionComplete, v1alpha1.ReasonCompleted)
	})
	if st := h.status("bad.yaml"); st.Phase != v1alpha1.PhaseRejected {
		t.Errorf("bad: phase %s, want Rejected (an invalid spec is not about hardware)", st.Phase)
	}
}

// TestAHardwareRejectionBeforeARestartIsOfferedAgainToo: the same with the
// rejection written by a previous controller: the outcome does not depend
// on a restart.
func TestAHardwareRejectionBeforeARestartIsOfferedAgainToo(t *testing.T) {
	m := &switchable{snap: fixedMachine()}
	h := newHarness(t, Config{})
	body := manifest("gpu", "true", "  resources: {gpuSlots: 1}\n")
	task, err := v1alpha1.ParseManifest("gpu.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	done := metav1.Now()
	st := v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRejected, SpecHash: v1alpha1.SpecHash(task.Spec), ObservedGeneration: 1,
		QueueSeq: 1, Progress: v1alpha1.Progress{ItemsTotal: 4}, CompletionTime: &done}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionComplete, Status: metav1.ConditionFalse,
		Reason: string(governor.ReasonNoGPU), Message: "needs a GPU; none is present"})
	data, err := spool.ReplaceStatus([]byte(body), &st)
	if err != nil {
		t.Fatal(err)
	}
	path := h.write("gpu.yaml", string(data))
	before, _ := os.Stat(path)
	h.startWith(m.get, nil)
	h.eventually("the governor has its first snapshot", func() bool { return h.gov.Budgets().HaveSnapshot })
	if after, _ := os.Stat(path); !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the rejected manifest was rewritten at start:\n%s", h.status("gpu.yaml").Phase)
	}
	m.set(func(s *governor.Snapshot) {
		s.GPUs = []governor.GPU{{ID: "nvidia:0", Name: "Card", Known: true, TotalBytes: 8 * gi, FreeBytes: 8 * gi}}
	})
	h.eventually("offered again after the restart and Done", func() bool {
		st := h.status("gpu.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.Progress.ItemsDone == 4
	})
}

func hasCondition(st v1alpha1.TaskStatus, typ, reason string) bool {
	c := meta.FindStatusCondition(st.Conditions, typ)
	return c != nil && c.Reason == reason
}

// TestScratchLeaseDirectoriesAreReal: with a scratch volume, every batch
// runs with LARDON3D_SCRATCH_DIR naming a directory that exists on the
// volume (the batch writes into it), named with this controller's
// prefix; each is removed once its lease is released; what a crashed
// controller of the same spool left is removed at start, and nothing else
// on the volume is touched.
func TestScratchLeaseDirectoriesAreReal(t *testing.T) {
	vol := t.TempDir()
	out := t.TempDir()
	h := newHarness(t, Config{ExitWhenDone: true})
	leases := scratch.New(h.dir, []string{vol}, zerolog.Nop())
	old := scratch.New(h.dir, nil, zerolog.Nop()) // a previous controller of this spool
	other := scratch.New(filepath.Join(h.dir, "elsewhere"), nil, zerolog.Nop())
	leftover := filepath.Join(vol, old.Prefix()+"7")
	foreign := filepath.Join(vol, other.Prefix()+"7")
	user := filepath.Join(vol, "lardon3d-lease-mine")
	for _, d := range []string{leftover, foreign, user} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	m := &switchable{snap: fixedMachine()}
	m.set(func(s *governor.Snapshot) { s.Scratch = []governor.ScratchVolume{{Path: vol, FreeBytes: 100 * gi}} })
	// Each batch proves its directory exists by writing into it, and
	// records its name.
	cmd := `test -d "$LARDON3D_SCRATCH_DIR" && echo x > "$LARDON3D_SCRATCH_DIR/f" && echo "$LARDON3D_SCRATCH_DIR" >> ` + filepath.Join(out, "dirs")
	h.write("s.yaml", manifest("s", cmd, "  resources: {scratch: 1Gi, fixed: {memory: 1Mi}, batch: {max: 2}}\n"))
	h.startWith(m.get, leases, governor.WithLeasePrefix(leases.Prefix()))
	if o := h.wait(); !o.AllDone {
		t.Fatalf("not Done: %+v", h.status("s.yaml"))
	}
	data, err := os.ReadFile(filepath.Join(out, "dirs"))
	if err != nil {
		t.Fatal(err)
	}
	dirs := strings.Fields(string(data))
	if len(dirs) != 2 || dirs[0] == dirs[1] {
		t.Fatalf("batches ran in %q, want two distinct lease directories", dirs)
	}
	for _, d := range dirs {
		if filepath.Dir(d) != vol || !strings.HasPrefix(filepath.Base(d), leases.Prefix()) {
			t.Errorf("lease directory %s: not %s/%s<id>", d, vol, leases.Prefix())
		}
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("lease directory %s still there after its release (%v)", d, err)
		}
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the previous controller's lease %s was not removed (%v)", leftover, err)
	}
	for _, d := range []string{foreign, user} {
		if _, err := os.Stat(filepath.Join(d, "sub")); err != nil {
			t.Errorf("%s is not ours and was touched: %v", d, err)
		}
	}
	if old.Prefix() == leases.Prefix() {
		t.Errorf("two starts share the lease prefix %s", leases.Prefix())
	}
}

// TestATaskAfterAnIdleSpellIsAdmittedOnAFreshSnapshot: while the queue is
// idle the prober probes only every idleProbeInterval, so the queue holds
// a task handed to it then until a fresh snapshot (queue.SnapshotCounter):
// memory freed during the idle spell admits the task at once, without a
// first Wait decided on the snapshot from before.
func TestATaskAfterAnIdleSpellIsAdmittedOnAFreshSnapshot(t *testing.T) {
	m := &switchable{snap: fixedMachine()}
	m.snap.MemAvailable = 16 << 20 // too little for the task below
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.startWithLogs(m.get, logs)
	// The start-up probe, then an idle spell of more than two intervals.
	h.eventually("the first snapshot", func() bool { return h.gov.Budgets().HaveSnapshot })
	time.Sleep(3 * DefaultProbeInterval)
	if !h.ctrl.host.prober.stale() {
		t.Fatal("the prober still probes at its busy pace on an idle queue")
	}
	m.mu.Lock()
	m.snap.MemAvailable = 8 * gi
	m.mu.Unlock()
	h.write("a.yaml", manifest("a", "true", "  resources: {fixed: {memory: 256Mi}}\n"))
	h.eventually("a Done", func() bool { return h.status("a.yaml").Phase == v1alpha1.PhaseDone })
	if strings.Contains(logs.String(), string(governor.ReasonInsufficientMemory)) {
		t.Errorf("the task waited for memory freed before it came:\n%s", logs.String())
	}
}
