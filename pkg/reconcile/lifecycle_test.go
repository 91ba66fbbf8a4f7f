package reconcile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// These tests pin the lifecycle rules of pkg/reconcile/doc.go: one
// generation applied whole, an edit that waits becomes the next generation
// when the current one ends (Done included), the same result with or
// without a restart, status writes retried until they land, and no phase
// transition the table forbids.

// syncBuffer is a log sink the controller and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// transitions returns every phase transition the controller logged (it
// logs each one it makes, and each one it refuses at error level).
func (b *syncBuffer) transitions(t *testing.T) (made, refused [][3]string) {
	t.Helper()
	b.mu.Lock()
	data := append([]byte(nil), b.buf.Bytes()...)
	b.mu.Unlock()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Level, Task, From, Phase, Message string
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Phase == "" {
			continue
		}
		tr := [3]string{line.Task, line.From, line.Phase}
		if line.Level == "error" && strings.Contains(line.Message, "forbidden phase transition") {
			refused = append(refused, tr)
		} else if line.From != line.Phase {
			made = append(made, tr)
		}
	}
	return made, refused
}

// checkTransitions fails on a refused transition or a logged one the table
// forbids.
func checkTransitions(t *testing.T, logs *syncBuffer) int {
	t.Helper()
	made, refused := logs.transitions(t)
	for _, r := range refused {
		t.Errorf("task %s: forbidden transition %s → %s attempted", r[0], r[1], r[2])
	}
	for _, m := range made {
		if !v1alpha1.AllowedTransition(v1alpha1.Phase(m[1]), v1alpha1.Phase(m[2])) {
			t.Errorf("task %s: forbidden transition %s → %s made", m[0], m[1], m[2])
		}
	}
	return len(made)
}

// countManifest is a task of n items, one per batch, whose every batch
// appends "MARK START" to out.
func countManifest(name, mark, out string, n int, extra string) string {
	return memManifest(name, mark, out, n, "", extra)
}

// memManifest is countManifest with a fixed memory cost per batch.
func memManifest(name, mark, out string, n int, fixed, extra string) string {
	res := "  resources: {batch: {max: 1}}\n"
	if fixed != "" {
		res = "  resources: {batch: {max: 1}, fixed: {memory: " + fixed + "}}\n"
	}
	return fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: %s}\nspec:\n"+
		"  command: [sh, -c, 'echo %s $LARDON3D_BATCH_START >> %s; sleep 0.05']\n  items: {count: %d}\n%s%s",
		name, mark, out, n, res, extra)
}

func countMark(t *testing.T, path, mark string) int {
	t.Helper()
	data, _ := os.ReadFile(path)
	n := 0
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, mark+" ") {
			n++
		}
	}
	return n
}

// Finding 1: an edit made while the task waits at a sequence break (Pending,
// but its worker still owns it) waits whole; today it swapped the command
// and items under the old generation and failed "out of range".
func TestEditAtASequenceBreakWaitsWhole(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	out := filepath.Join(t.TempDir(), "out")
	// blocker is ahead of t in the FIFO but paused; once resumed it takes
	// 5 GiB of 8 at t's next sequence break, and t (5 GiB) must wait there.
	gate := filepath.Join(t.TempDir(), "gate")
	h.write("blocker.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: blocker}\nspec:\n"+
		"  command: [sh, -c, 'while [ ! -e "+gate+" ]; do sleep 0.02; done']\n  items: {count: 1}\n"+
		"  resources: {fixed: {memory: 5Gi}}\n  paused: true\n")
	h.start()
	h.eventually("blocker queued", func() bool { return h.status("blocker.yaml").QueueSeq > 0 })
	h.write("t.yaml", memManifest("t", "OLD", out, 20, "5Gi", ""))
	h.eventually("t running", func() bool { return countMark(t, out, "OLD") >= 2 })
	h.write("blocker.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: blocker}\nspec:\n"+
		"  command: [sh, -c, 'while [ ! -e "+gate+" ]; do sleep 0.02; done']\n  items: {count: 1}\n"+
		"  resources: {fixed: {memory: 5Gi}}\n  paused: false\n")
	h.eventually("t waits at a sequence break", func() bool {
		st := h.status("t.yaml")
		return st.Phase == v1alpha1.PhasePending && st.Progress.ItemsDone > 0 && h.status("blocker.yaml").Phase == v1alpha1.PhaseRunning
	})
	h.write("t.yaml", memManifest("t", "NEW", out, 8, "5Gi", ""))
	h.eventually("the edit reported pending, generation 1 kept", func() bool {
		st := h.status("t.yaml")
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSpecApplied)
		return c != nil && c.Reason == v1alpha1.ReasonSpecChangePending && st.ObservedGeneration == 1 && st.Progress.ItemsTotal == 20
	})
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.eventually("generation 2 Done", func() bool {
		st := h.status("t.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.ObservedGeneration == 2
	})
	st := h.status("t.yaml")
	if st.Progress.ItemsDone != 8 || st.Progress.ItemsTotal != 8 || meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSpecApplied) != nil {
		t.Errorf("generation 2: %+v", st)
	}
	if old, new := countMark(t, out, "OLD"), countMark(t, out, "NEW"); old != 20 || new != 8 {
		t.Errorf("batches run: %d OLD (want 20), %d NEW (want 8)", old, new)
	}
	checkTransitions(t, logs)
}

// Finding 2: an edit of a running task becomes the next generation when the
// current one ends Done, and a restart in the middle gives the same end.
func TestEditWhileRunningRunsWhenDoneWithOrWithoutRestart(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			logs := &syncBuffer{}
			h := newHarness(t, Config{})
			h.logs = logs
			out := filepath.Join(t.TempDir(), "out")
			h.write("t.yaml", countManifest("t", "OLD", out, 6, ""))
			h.start()
			h.eventually("running", func() bool { return countMark(t, out, "OLD") >= 2 })
			h.write("t.yaml", countManifest("t", "NEW", out, 6, ""))
			h.eventually("the edit reported pending", func() bool {
				c := meta.FindStatusCondition(h.status("t.yaml").Conditions, v1alpha1.ConditionSpecApplied)
				return c != nil && c.Reason == v1alpha1.ReasonSpecChangePending
			})
			if restart {
				h.restart()
			}
			h.eventually("the NEW generation Done", func() bool {
				st := h.status("t.yaml")
				return st.Phase == v1alpha1.PhaseDone && st.ObservedGeneration == 2
			})
			st := h.status("t.yaml")
			if st.Progress.ItemsDone != 6 || meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSpecApplied) != nil {
				t.Errorf("final status: %+v", st)
			}
			if n := countMark(t, out, "NEW"); n != 6 {
				t.Errorf("NEW ran %d batches, want 6", n)
			}
			checkTransitions(t, logs)
		})
	}
}

// Editing a Done task runs it again, and its Done dependents after it; the
// dependent says why.
func TestEditOfADoneTaskRerunsItsDoneDependents(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	out := filepath.Join(t.TempDir(), "out")
	h.write("a.yaml", countManifest("a", "A1", out, 2, ""))
	h.write("b.yaml", countManifest("b", "B", out, 2, "  dependsOn: [a]\n"))
	h.write("c.yaml", countManifest("c", "C", out, 1, "  dependsOn: [b]\n"))
	h.write("x.yaml", countManifest("x", "X", out, 1, ""))
	h.start()
	h.eventually("all Done", func() bool {
		return h.status("c.yaml").Phase == v1alpha1.PhaseDone && h.status("x.yaml").Phase == v1alpha1.PhaseDone
	})
	h.write("a.yaml", countManifest("a", "A2", out, 2, ""))
	h.eventually("a, b and c Done again", func() bool {
		return h.status("a.yaml").ObservedGeneration == 2 && h.status("a.yaml").Phase == v1alpha1.PhaseDone &&
			h.status("b.yaml").ObservedGeneration == 2 && h.status("b.yaml").Phase == v1alpha1.PhaseDone &&
			h.status("c.yaml").ObservedGeneration == 2 && h.status("c.yaml").Phase == v1alpha1.PhaseDone
	})
	if n, m := countMark(t, out, "B"), countMark(t, out, "C"); n != 4 || m != 2 {
		t.Errorf("b ran %d batches (want 4), c %d (want 2)", n, m)
	}
	if x := h.status("x.yaml"); x.ObservedGeneration != 1 {
		t.Errorf("x, which depends on nothing, re-ran: generation %d", x.ObservedGeneration)
	}
	c := meta.FindStatusCondition(h.status("b.yaml").Conditions, v1alpha1.ConditionRerun)
	if c == nil || c.Reason != v1alpha1.ReasonDependencyRerun || !strings.Contains(c.Message, "dependency a") {
		t.Errorf("b's Rerun condition: %+v", c)
	}
	checkTransitions(t, logs)
}

// failingSpool fails every status write while failing is set.
type failingSpool struct {
	Spool
	failing sync.Map // path → struct{}
	mu      sync.Mutex
	failed  int
}

func (f *failingSpool) WriteStatus(path string, st *v1alpha1.TaskStatus) error {
	if _, ok := f.failing.Load(path); ok {
		f.mu.Lock()
		f.failed++
		f.mu.Unlock()
		return fmt.Errorf("injected: %s is read-only", filepath.Base(path))
	}
	return f.Spool.WriteStatus(path, st)
}

// Finding 3: a failed status write, commit points included, is retried
// with backoff until it lands; describe's source (the published list) shows
// the failure meanwhile.
func TestFailedStatusWritesAreRetriedUntilTheyLand(t *testing.T) {
	fs := &failingSpool{}
	h := newHarness(t, Config{})
	h.wrap = func(s Spool) Spool { fs.Spool = s; return fs }
	out := filepath.Join(t.TempDir(), "out")
	path := h.write("t.yaml", countManifest("t", "T", out, 6, ""))
	h.start()
	h.eventually("running", func() bool { return h.status("t.yaml").Phase == v1alpha1.PhaseRunning })
	fs.failing.Store(path, struct{}{})
	h.eventually("every batch run while writes fail", func() bool { return countMark(t, out, "T") == 6 })
	stateDir := filepath.Join(h.dir, ".lardon3d")
	h.eventually("the failure published", func() bool {
		errs, err := ReadWriteErrors(stateDir)
		return err == nil && errs["t"].Attempts >= 2 && strings.Contains(errs["t"].Error, "injected")
	})
	if st := h.status("t.yaml"); st.Phase == v1alpha1.PhaseDone {
		t.Fatalf("Done reached the file while writes failed")
	}
	fs.failing.Delete(path)
	h.eventually("Done and every batch committed in the file", func() bool {
		st := h.status("t.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.Progress.ItemsDone == 6 && st.Progress.BatchesDone == 6
	})
	h.eventually("the failure list cleared", func() bool {
		errs, err := ReadWriteErrors(stateDir)
		return err == nil && len(errs) == 0
	})
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.failed < 2 {
		t.Errorf("only %d failed attempts: no retry was exercised", fs.failed)
	}
}

// Finding 8: the spool's own error is what Run returns, not "spool stopped".
func TestRunReportsTheSpoolsError(t *testing.T) {
	h := newHarness(t, Config{ExitWhenDone: true, StateDir: t.TempDir()})
	h.wrap = func(s Spool) Spool {
		// The directory goes away after Open: the spool's Run fails.
		if err := os.RemoveAll(h.dir); err != nil {
			t.Fatal(err)
		}
		return s
	}
	h.start()
	select {
	case <-h.done:
		err := <-h.errc
		if err == nil || !strings.Contains(err.Error(), "spool") || strings.Contains(err.Error(), "spool stopped") || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Run's error: %v", err)
		}
		h.done <- Outcome{}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
}

// Finding 4: pausing between batches and resuming goes Paused → Running,
// never Paused → Reserved, and a batch that ends while paused may end the
// task Done from Paused; no transition is refused.
func TestPauseBetweenBatchesUsesOnlyAllowedTransitions(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	out := filepath.Join(t.TempDir(), "out")
	// 24 items of 50 ms: the pauses below come long before the end, even
	// on a loaded machine (a Done task is accepted all the same: a pause
	// that came too late has nothing to stop).
	h.write("t.yaml", countManifest("t", "T", out, 24, ""))
	h.start()
	for i := 0; i < 3; i++ {
		h.eventually("progress", func() bool { return countMark(t, out, "T") > 2*i })
		h.write("t.yaml", countManifest("t", "T", out, 24, "  paused: true\n"))
		// Paused holding its reservation, or Pending when the pause came at
		// a sequence break (nothing held there to keep).
		h.eventually("paused", func() bool {
			p := h.status("t.yaml").Phase
			return p == v1alpha1.PhasePaused || p == v1alpha1.PhasePending || p == v1alpha1.PhaseDone
		})
		time.Sleep(80 * time.Millisecond) // the batch in flight ends while paused
		h.write("t.yaml", countManifest("t", "T", out, 24, "  paused: false\n"))
	}
	h.eventually("Done", func() bool { return h.status("t.yaml").Phase == v1alpha1.PhaseDone })
	if n := checkTransitions(t, logs); n < 6 {
		t.Errorf("only %d transitions logged", n)
	}
	made, _ := logs.transitions(t)
	for _, m := range made {
		if m[1] == string(v1alpha1.PhasePaused) && m[2] == string(v1alpha1.PhaseReserved) {
			t.Errorf("Paused → Reserved")
		}
	}
}

// A manifest that validates but whose layout the editor refuses (a
// flow-style top level) can never hold a status: it does not run (a batch
// already started is cancelled), and it is reported as ignored.
func TestAManifestThatCannotHoldAStatusDoesNotRun(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	marker := filepath.Join(t.TempDir(), "ran")
	h.write("flow.yaml", `{apiVersion: lardon3d.io/v1alpha1, kind: Task, metadata: {name: flow}, spec: {command: [sh, -c, 'sleep 1; touch `+marker+`'], items: {count: 1}}}`+"\n")
	h.write("ok.yaml", countManifest("ok", "OK", filepath.Join(t.TempDir(), "out"), 1, ""))
	h.start()
	h.eventually("the other task Done", func() bool { return h.status("ok.yaml").Phase == v1alpha1.PhaseDone })
	h.eventually("the flow-style manifest ignored", func() bool {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		return strings.Contains(logs.buf.String(), "its status cannot be written into it")
	})
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the task of a manifest that cannot hold a status ran to its end")
	}
	if v := h.gov.Budgets(); v.Reservations != 0 {
		t.Errorf("%d reservations left", v.Reservations)
	}
}
