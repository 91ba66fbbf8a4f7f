package reconcile

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// The controller runs in-process here, under -race, on a real spool with
// real processes and the real governor; only the machine snapshot is fixed.

const gi = int64(1) << 30

func fixedMachine() governor.Snapshot {
	return governor.Snapshot{Taken: time.Now(), MemTotal: 8 * gi, MemAvailable: 8 * gi, CPUs: 2}
}

type harness struct {
	t     *testing.T
	dir   string
	ctrl  *Controller
	gov   *governor.Governor
	done  chan Outcome
	errc  chan error
	extra Config
	// wrap, when set, wraps the real spool (to record or fail writes);
	// logs, when set, also receives the controller's JSON log.
	wrap func(Spool) Spool
	logs io.Writer
	// snapshot, leases and govOpts, when set, replace the fixed machine,
	// run without scratch leases and the governor's default options.
	snapshot SnapshotFunc
	leases   *scratch.Leases
	govOpts  []governor.Option
	// metrics, when set, receives what the controller reports.
	metrics Metrics
	stop    context.CancelFunc
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, dir: dir, extra: cfg}
}

func (h *harness) write(file, body string) string {
	h.t.Helper()
	path := filepath.Join(h.dir, file)
	tmp := filepath.Join(h.dir, "."+file+".tmp")
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		h.t.Fatal(err)
	}
	return path
}

func (h *harness) start() {
	h.t.Helper()
	sp, err := spool.Open(h.dir, spool.Options{Logger: zerolog.Nop()})
	if err != nil {
		h.t.Fatal(err)
	}
	h.gov = governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1}, h.govOpts...)
	cfg := h.extra
	cfg.SpoolDir = h.dir
	cfg.KillGrace = time.Second
	snap := h.snapshot
	if snap == nil {
		snap = func() (governor.Snapshot, error) { return fixedMachine(), nil }
	}
	var s Spool = sp
	if h.wrap != nil {
		s = h.wrap(sp)
	}
	var logw io.Writer = zerolog.NewTestWriter(h.t)
	if h.logs != nil {
		logw = io.MultiWriter(logw, h.logs)
	}
	h.ctrl = New(cfg, Deps{Spool: s, Governor: h.gov, Snapshot: snap, Scratch: h.leases, Logger: zerolog.New(logw), Metrics: h.metrics})
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	done, errc, ctrl := make(chan Outcome, 1), make(chan error, 1), h.ctrl
	h.done, h.errc = done, errc
	go func() {
		out, err := ctrl.Run(ctx)
		done <- out
		errc <- err
	}()
	h.t.Cleanup(func() {
		cancel()
		select {
		case out := <-done:
			done <- out // for a restart that already took it
		case <-time.After(30 * time.Second):
			h.t.Error("the controller did not stop")
		}
	})
}

// restart stops the controller gracefully and starts a new one on the
// same spool.
func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	select {
	case out := <-h.done:
		h.done <- out
	case <-time.After(30 * time.Second):
		h.t.Fatal("the controller did not stop")
	}
	h.start()
}

// wait returns the outcome of a run started with ExitWhenDone.
func (h *harness) wait() Outcome {
	h.t.Helper()
	select {
	case out := <-h.done:
		if err := <-h.errc; err != nil {
			h.t.Fatal(err)
		}
		h.done <- out // for Cleanup
		return out
	case <-time.After(60 * time.Second):
		h.t.Fatal("the controller did not settle")
		return Outcome{}
	}
}

func (h *harness) status(file string) v1alpha1.TaskStatus {
	h.t.Helper()
	data, err := os.ReadFile(filepath.Join(h.dir, file))
	if err != nil {
		h.t.Fatal(err)
	}
	task, _ := v1alpha1.ParseManifest(file, data)
	if task == nil {
		h.t.Fatalf("%s does not parse", file)
	}
	return task.Status
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func manifest(name, command string, extra string) string {
	return "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: " + name + "}\nspec:\n  command: [sh, -c, '" + command + "']\n  items: {count: 4}\n" + extra
}

func TestPipelineReachesDoneAndReleasesEverything(t *testing.T) {
	h := newHarness(t, Config{ExitWhenDone: true})
	h.write("a.yaml", manifest("a", "true", "  resources: {batch: {max: 2}, fixed: {memory: 1Gi}}\n"))
	h.write("b.yaml", manifest("b", "true", "  dependsOn: [a]\n"))
	h.write("c.yaml", manifest("c", "exit 3", "  dependsOn: [a]\n"))
	h.write("d.yaml", manifest("d", "true", "  dependsOn: [c]\n"))
	h.start()
	out := h.wait()
	if out.AllDone {
		t.Fatalf("AllDone with a failing task")
	}
	for file, want := range map[string]v1alpha1.Phase{"a.yaml": v1alpha1.PhaseDone, "b.yaml": v1alpha1.PhaseDone,
		"c.yaml": v1alpha1.PhaseFailed, "d.yaml": v1alpha1.PhasePending} {
		if st := h.status(file); st.Phase != want {
			t.Errorf("%s: phase %s, want %s (%+v)", file, st.Phase, want, st.Conditions)
		}
	}
	a := h.status("a.yaml")
	if a.Progress.ItemsDone != 4 || a.Progress.BatchesDone != 2 || a.Reservation != nil || a.LogFile == "" {
		t.Errorf("a: %+v", a)
	}
	d := meta.FindStatusCondition(h.status("d.yaml").Conditions, v1alpha1.ConditionDependenciesReady)
	if d == nil || d.Reason != v1alpha1.ReasonDependencyFailed || !strings.Contains(d.Message, "c") {
		t.Errorf("d's dependency condition: %+v", d)
	}
	if v := h.gov.Budgets(); v.Reservations != 0 || v.Memory.Reserved != 0 {
		t.Errorf("after the run: %d reservations, %d bytes reserved", v.Reservations, v.Memory.Reserved)
	}
}

func TestDuplicateNameIsRejectedAndTakesOverWhenTheOwnerGoes(t *testing.T) {
	h := newHarness(t, Config{})
	first := h.write("first.yaml", manifest("same", "sleep 30", ""))
	h.start()
	h.eventually("first running", func() bool { return h.status("first.yaml").Phase == v1alpha1.PhaseRunning })
	h.write("second.yaml", manifest("same", "true", ""))
	h.eventually("second rejected", func() bool {
		st := h.status("second.yaml")
		c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionValid)
		return st.Phase == v1alpha1.PhaseRejected && c != nil && c.Reason == v1alpha1.ReasonDuplicateName && strings.Contains(c.Message, "first.yaml")
	})
	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	h.eventually("second takes the name and runs to Done", func() bool { return h.status("second.yaml").Phase == v1alpha1.PhaseDone })
	h.eventually("every reservation released", func() bool { return h.gov.Budgets().Reservations == 0 })
}

func TestADuplicateRejectedBeforeARestartRunsOnceTheNameIsFree(t *testing.T) {
	h := newHarness(t, Config{ExitWhenDone: true})
	// What a previous controller wrote: rejected as a duplicate of a file
	// that is gone since.
	body := manifest("same", "true", "")
	task, err := v1alpha1.ParseManifest("second.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	st := v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRejected, SpecHash: v1alpha1.SpecHash(task.Spec), ObservedGeneration: 1}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionValid, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonDuplicateName, Message: `metadata.name "same" is already used by first.yaml`})
	data, err := spool.ReplaceStatus([]byte(body), &st)
	if err != nil {
		t.Fatal(err)
	}
	h.write("second.yaml", string(data))
	h.start()
	if out := h.wait(); !out.AllDone {
		t.Fatalf("not all Done: %s", h.status("second.yaml").Phase)
	}
}

func TestARestartTouchesNoFinishedManifest(t *testing.T) {
	h := newHarness(t, Config{ExitWhenDone: true})
	// Finished under a previous controller, with no queueSeq or logFile, and
	// a glob whose files are gone since: resumed as is, never rewritten.
	body := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {glob: \"gone/*.jpg\"}\n"
	task, err := v1alpha1.ParseManifest("old.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	st := v1alpha1.TaskStatus{Phase: v1alpha1.PhaseDone, SpecHash: v1alpha1.SpecHash(task.Spec), ObservedGeneration: 1,
		Progress: v1alpha1.Progress{ItemsDone: 3, ItemsTotal: 3, BatchesDone: 1}}
	data, err := spool.ReplaceStatus([]byte(body), &st)
	if err != nil {
		t.Fatal(err)
	}
	path := h.write("old.yaml", string(data))
	h.write("next.yaml", manifest("next", "true", "  dependsOn: [old]\n"))
	before, _ := os.Stat(path)
	h.start()
	if out := h.wait(); !out.AllDone {
		t.Fatalf("not all Done: old %s, next %s", h.status("old.yaml").Phase, h.status("next.yaml").Phase)
	}
	after, _ := os.Stat(path)
	got, _ := os.ReadFile(path)
	if string(got) != string(data) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the finished manifest was rewritten:\n%s", got)
	}
}

func TestEditWhileRunningWaitsAndAFailedTaskTakesIt(t *testing.T) {
	h := newHarness(t, Config{})
	// The batch fails once the marker exists; the edit then fixes the command.
	marker := filepath.Join(t.TempDir(), "fail-now")
	h.write("t.yaml", manifest("t", "while [ ! -e "+marker+" ]; do sleep 0.02; done; exit 1", ""))
	h.start()
	h.eventually("running", func() bool { return h.status("t.yaml").Phase == v1alpha1.PhaseRunning })
	h.write("t.yaml", manifest("t", "true", ""))
	h.eventually("the edit reported as pending", func() bool {
		c := meta.FindStatusCondition(h.status("t.yaml").Conditions, v1alpha1.ConditionSpecApplied)
		return c != nil && c.Reason == v1alpha1.ReasonSpecChangePending
	})
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h.eventually("the failed generation replaced by the edited one, Done", func() bool {
		st := h.status("t.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.ObservedGeneration == 2 &&
			meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSpecApplied) == nil
	})
}

func TestInvalidSpecIsRejectedAndAFixPutsItBackToPending(t *testing.T) {
	h := newHarness(t, Config{})
	h.write("bad.yaml", manifest("bad", "true", "  resources: {batch: {min: 3, max: 2}}\n"))
	h.start()
	h.eventually("rejected", func() bool {
		st := h.status("bad.yaml")
		return st.Phase == v1alpha1.PhaseRejected && strings.Contains(st.Conditions[0].Message, "spec.resources.batch.max")
	})
	h.write("bad.yaml", manifest("bad", "true", "  resources: {batch: {min: 2, max: 2}}\n"))
	h.eventually("fixed and Done", func() bool {
		st := h.status("bad.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.Progress.BatchesDone == 2
	})
}
