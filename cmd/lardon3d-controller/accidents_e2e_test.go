package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// The accidents an unlucky user has while the controller runs are
// survived without a restart.

// rm -rf SPOOL/.lardon3d mid-run: the state directory is made again, all
// of it (logs/ as run/), and the task goes on to Done.
func TestADeletedStateDirectoryIsMadeAgain(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "slow.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'sleep 0.2']
  items: {count: 12}
  resources: {batch: {max: 1}}
`)
	startController(t, spool)
	state := filepath.Join(spool, ".lardon3d")
	eventually(t, 30*time.Second, "the first batches done", func() bool {
		task := readTask(t, path)
		return task.Status.Progress.ItemsDone >= 2
	})
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the task to be Done after its state directory was removed", func() bool {
		return phaseOf(t, path) == v1alpha1.PhaseDone
	})
	for _, part := range []string{"logs", "run"} {
		if fi, err := os.Stat(filepath.Join(state, part)); err != nil || !fi.IsDir() {
			t.Errorf("%s not made again: %v", part, err)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "logs", "slow.log")); err != nil {
		t.Errorf("the task's log not written again: %v", err)
	}
}
