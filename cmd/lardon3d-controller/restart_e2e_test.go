package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// restart against a real controller: a task of four one-item batches
// whose third batch runs a minute; its command is edited while that batch
// runs (the edit waits under SpecApplied=False); restart then cancels the
// batch (its process is gone), and the edited command runs as generation 2
// on the items left only: the two committed before are kept. A restart
// with no edit waiting changes nothing.
func TestRestartAppliesAWaitingEditNow(t *testing.T) {
	spool := newSpool(t)
	work := t.TempDir()
	out, pidFile := filepath.Join(work, "out"), filepath.Join(work, "pid")
	path := writeManifest(t, spool, "long.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: long}
spec:
  command: [sh, -c, 'echo OLD $LARDON3D_BATCH_START >> `+out+`; if [ $LARDON3D_BATCH_START -ge 2 ]; then echo $$$$ > `+pidFile+`; exec sleep 60; fi']
  items: {count: 4}
  resources:
    fixed: {memory: 32Mi}
    batch: {min: 1, max: 1}
`)
	startController(t, spool)
	eventually(t, time.Minute, "the long third batch", func() bool {
		_, err := os.Stat(pidFile)
		task := readTask(t, path)
		return err == nil && task.Status.Progress.ItemsDone == 2 && task.Status.Phase == v1alpha1.PhaseRunning
	})
	data, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("pid file %q: %v", data, err)
	}
	if msg, code := runCLI(t, "restart", "--spool", spool, "long"); code != 0 || !strings.Contains(msg, "no edit waiting") {
		t.Fatalf("restart with no edit: exit %d: %s", code, msg)
	}
	if task := readTask(t, path); task.Spec.RestartToken != "" {
		t.Fatalf("restart with no edit wrote a token: %q", task.Spec.RestartToken)
	}

	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.NewReplacer("echo OLD", "echo NEW", "-ge 2", "-ge 99").Replace(string(src))), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the edit waiting under SpecApplied=False", func() bool {
		c := meta.FindStatusCondition(readTask(t, path).Status.Conditions, v1alpha1.ConditionSpecApplied)
		return c != nil && c.Reason == v1alpha1.ReasonSpecChangePending
	})
	if task := readTask(t, path); task.Status.ObservedGeneration != 1 || task.Status.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("before restart: generation %d, %s", task.Status.ObservedGeneration, task.Status.Phase)
	}
	if msg, code := runCLI(t, "restart", "--spool", spool, "long"); code != 0 || !strings.Contains(msg, "task long restarted") {
		t.Fatalf("restart: exit %d: %s", code, msg)
	}
	eventually(t, 30*time.Second, "generation 2 Done", func() bool {
		st := readTask(t, path).Status
		return st.ObservedGeneration == 2 && st.Phase == v1alpha1.PhaseDone
	})
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the cancelled batch's process %d is still alive", pid)
	}
	got, _ := os.ReadFile(out)
	if want := "OLD 0\nOLD 1\nOLD 2\nNEW 2\nNEW 3\n"; string(got) != want {
		t.Errorf("the batches ran:\n%s\nwant:\n%s", got, want)
	}
	st := readTask(t, path).Status
	if st.Progress.ItemsDone != 4 || meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSpecApplied) != nil {
		t.Errorf("after restart: %+v", st)
	}
}
