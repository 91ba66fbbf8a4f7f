package reconcile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// review: a known task whose file an edit breaks (unparseable YAML) keeps
// running, and the file is picked up again once fixed (handleFile's rule).
// The next status write, a commit point, found the broken file
// (ErrNotRewritable) and the controller took that for "this manifest can
// never hold a status": it cancelled the task, killing its batch, and
// dropped the commit.
func TestReviewABrokenEditDoesNotCancelARunningTask(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	out := filepath.Join(t.TempDir(), "out")
	good := fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec:\n"+
		"  command: [sh, -c, 'echo T $LARDON3D_BATCH_START >> %s; sleep 0.2']\n  items: {count: 6}\n  resources: {batch: {max: 1}}\n", out)
	h.write("t.yaml", good)
	h.start()
	h.eventually("running, its status in the file", func() bool {
		return countMark(t, out, "T") >= 1 && h.status("t.yaml").Phase == v1alpha1.PhaseRunning
	})
	// An edit saved half-way: not YAML any more.
	h.write("t.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec: [unclosed\n")
	cancelled := func() bool {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		return strings.Contains(logs.buf.String(), "task cancelled")
	}
	h.eventually("every batch run, or the task cancelled", func() bool { return countMark(t, out, "T") >= 6 || cancelled() })
	if cancelled() {
		t.Fatalf("the running task was cancelled because its file was broken for a moment (%d of 6 batches ran)", countMark(t, out, "T"))
	}
	h.write("t.yaml", good)
	h.eventually("Done in the file", func() bool {
		st := h.status("t.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.Progress.ItemsDone == 6
	})
	if n := countMark(t, out, "T"); n != 6 {
		t.Errorf("%d batches ran, want 6", n)
	}
	checkTransitions(t, logs)
}

// review: a task the governor rejects at a sequence break (the machine's
// memory shrank below what the task needs) goes from Running straight to
// Rejected in the queue, a transition the phase table forbids: the
// reconciler refuses it, the file stays Running for good, and the task is
// never settled.
func TestReviewARejectionAtASequenceBreakReachesTheFile(t *testing.T) {
	logs := &syncBuffer{}
	m := &switchable{snap: fixedMachine()}
	h := newHarness(t, Config{})
	h.logs = logs
	out := filepath.Join(t.TempDir(), "out")
	h.write("t.yaml", fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec:\n"+
		"  command: [sh, -c, 'echo T $LARDON3D_BATCH_START >> %s; sleep 0.3']\n  items: {count: 6}\n"+
		"  resources: {batch: {max: 1}, fixed: {memory: 5Gi}}\n", out))
	h.startWithLogs(m.get, logs)
	h.eventually("running, its status in the file", func() bool {
		return countMark(t, out, "T") >= 1 && h.status("t.yaml").Phase == v1alpha1.PhaseRunning
	})
	m.set(func(s *governor.Snapshot) { s.MemTotal, s.MemAvailable = 4*gi, 4*gi })
	refused := func() bool { _, r := logs.transitions(t); return len(r) > 0 }
	h.eventually("Rejected in the file, or a transition refused", func() bool {
		return h.status("t.yaml").Phase == v1alpha1.PhaseRejected || refused()
	})
	checkTransitions(t, logs)
	if st := h.status("t.yaml"); st.Phase != v1alpha1.PhaseRejected {
		t.Errorf("the file says %s; the queue rejected the task (ExceedsCapacity)", st.Phase)
	}
}

// startWithLogs is startWith (no scratch leases) with the controller's log
// also sent to logs.
func (h *harness) startWithLogs(snap SnapshotFunc, logs io.Writer) {
	h.t.Helper()
	h.logs = logs
	h.startWith(snap, nil)
}

// review: a copy of a running task's manifest (cp a.yaml b.yaml, the name
// left as it is) is a duplicate and must be written Rejected. Its status,
// copied from a.yaml, says Running, and Running → Rejected is refused: b.yaml
// keeps saying Running, and an --exit-when-done run never settles.
func TestReviewACopyOfARunningManifestIsRejected(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	out := filepath.Join(t.TempDir(), "out")
	h.write("a.yaml", fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: a}\nspec:\n"+
		"  command: [sh, -c, 'echo A >> %s; sleep 0.3']\n  items: {count: 20}\n  resources: {batch: {max: 1}}\n", out))
	h.start()
	h.eventually("a running, its status in the file", func() bool { return h.status("a.yaml").Phase == v1alpha1.PhaseRunning })
	data, err := os.ReadFile(filepath.Join(h.dir, "a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	h.write("b.yaml", string(data))
	refused := func() bool { _, r := logs.transitions(t); return len(r) > 0 }
	h.eventually("b Rejected in its file, or a transition refused", func() bool {
		return h.status("b.yaml").Phase == v1alpha1.PhaseRejected || refused()
	})
	checkTransitions(t, logs)
	if st := h.status("b.yaml"); st.Phase != v1alpha1.PhaseRejected || !hasCondition(st, v1alpha1.ConditionValid, v1alpha1.ReasonDuplicateName) {
		t.Errorf("b.yaml, a duplicate of a: phase %s", st.Phase)
	}
}

// review: a controller killed with -9 leaves Running in the file; a spec
// made invalid before the restart must end Rejected. Running → Rejected is
// refused: the file keeps saying Running, the task is in no queue, and the
// run never settles.
func TestReviewAnInvalidEditAfterACrashIsRejected(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{ExitWhenDone: true})
	h.logs = logs
	valid := manifest("t", "true", "")
	task, err := v1alpha1.ParseManifest("t.yaml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	st := v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, SpecHash: v1alpha1.SpecHash(task.Spec), ObservedGeneration: 1,
		QueueSeq: 1, Progress: v1alpha1.Progress{ItemsTotal: 4, ItemsDone: 1, BatchesDone: 1}}
	// The spec as edited while no controller ran: batch.min above batch.max.
	invalid := manifest("t", "true", "  resources: {batch: {min: 3, max: 2}}\n")
	data, err := spool.ReplaceStatus([]byte(invalid), &st)
	if err != nil {
		t.Fatal(err)
	}
	h.write("t.yaml", string(data))
	h.start()
	refused := func() bool { _, r := logs.transitions(t); return len(r) > 0 }
	h.eventually("Rejected in the file, or a transition refused", func() bool {
		return h.status("t.yaml").Phase == v1alpha1.PhaseRejected || refused()
	})
	checkTransitions(t, logs)
	if st := h.status("t.yaml"); st.Phase != v1alpha1.PhaseRejected {
		t.Fatalf("the file says %s, want Rejected (InvalidSpec)", st.Phase)
	}
	h.wait() // settled
}

// review: mv a.yaml b.yaml, where b.yaml is a duplicate of a.yaml's task
// (same metadata.name), is a rename of the running task: its batch keeps
// running. The spool takes it for a modification of b.yaml and emits
// a.yaml's deletion after the grace period: the task is cancelled.
func TestReviewRenameOntoADuplicateKeepsTheBatch(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	gate := filepath.Join(t.TempDir(), "gate")
	body := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: job}\nspec:\n" +
		"  command: [sh, -c, 'while [ ! -e " + gate + " ]; do sleep 0.05; done']\n  items: {count: 1}\n"
	h.write("a.yaml", body)
	h.start()
	h.eventually("a running", func() bool { return h.status("a.yaml").Phase == v1alpha1.PhaseRunning })
	h.write("b.yaml", strings.Replace(body, "sleep 0.05", "sleep 0.06", 1))
	h.eventually("b Rejected as a duplicate", func() bool { return h.status("b.yaml").Phase == v1alpha1.PhaseRejected })
	if err := os.Rename(filepath.Join(h.dir, "a.yaml"), filepath.Join(h.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(spool.DefaultDeleteGrace + time.Second)
	logs.mu.Lock()
	cancelled := strings.Contains(logs.buf.String(), "task cancelled")
	logs.mu.Unlock()
	if cancelled {
		t.Error("the running task was cancelled by a rename of its manifest")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.eventually("Done in b.yaml", func() bool { return h.status("b.yaml").Phase == v1alpha1.PhaseDone })
}

// The other way round, mv b.yaml a.yaml (the duplicate onto the running
// task's file), is an edit of the running task: its batch keeps running.
func TestReviewADuplicateMovedOntoItsOwnerIsAnEdit(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	gate := filepath.Join(t.TempDir(), "gate")
	body := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: job}\nspec:\n" +
		"  command: [sh, -c, 'while [ ! -e " + gate + " ]; do sleep 0.05; done']\n  items: {count: 1}\n"
	h.write("a.yaml", body)
	h.start()
	h.eventually("a running", func() bool { return h.status("a.yaml").Phase == v1alpha1.PhaseRunning })
	h.write("b.yaml", strings.Replace(body, "sleep 0.05", "sleep 0.06", 1))
	h.eventually("b Rejected as a duplicate", func() bool { return h.status("b.yaml").Phase == v1alpha1.PhaseRejected })
	if err := os.Rename(filepath.Join(h.dir, "b.yaml"), filepath.Join(h.dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(spool.DefaultDeleteGrace + time.Second)
	logs.mu.Lock()
	cancelled := strings.Contains(logs.buf.String(), "task cancelled")
	logs.mu.Unlock()
	if cancelled {
		t.Error("the running task was cancelled")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.eventually("generation 1 Done, then the edit's generation 2 Done", func() bool {
		st := h.status("a.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.ObservedGeneration == 2
	})
	checkTransitions(t, logs)
}
