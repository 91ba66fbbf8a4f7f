package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// The machine's history.db scribbled over (16 pages, the meta pages
// among them) and later deleted while the controller runs: the controller
// neither crashes nor forgets; it moves the damaged file aside, warns once
// per accident, and a new file holds everything the run learned.
func TestTheHistoryStoreSurvivesDamageAndDeletionWhileRunning(t *testing.T) {
	spool := newSpool(t)
	task := func(name string) string {
		return writeManifest(t, spool, name+".yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'true']
  items: {count: 1}
  resources: {profile: `+name+`}
`)
	}
	done := func(path string) {
		t.Helper()
		eventually(t, 30*time.Second, path+" Done", func() bool { return phaseOf(t, path) == v1alpha1.PhaseDone })
	}
	c := startController(t, spool)
	db := testHistoryPath(spool)
	done(task("before"))
	eventually(t, 10*time.Second, "the history written", func() bool {
		fi, err := os.Stat(db)
		return err == nil && fi.Size() > 0
	})
	time.Sleep(500 * time.Millisecond) // past a flush of the history (250 ms)

	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 16*4096)
	rnd := rand.New(rand.NewPCG(60, 10))
	for i := range junk {
		junk[i] = byte(rnd.Uint32())
	}
	if _, err := f.WriteAt(junk, 0); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	done(task("scribbled"))
	eventually(t, 10*time.Second, "a warning of the damage", func() bool {
		return strings.Count(c.stderr.String(), "damaged or removed while running") == 1
	})
	if aside, _ := filepath.Glob(db + ".corrupt-*"); len(aside) != 1 {
		t.Errorf("the damaged file not moved aside: %v", aside)
	}

	if err := os.Remove(db); err != nil {
		t.Fatal(err)
	}
	done(task("deleted"))
	eventually(t, 10*time.Second, "a warning of the deletion", func() bool {
		return strings.Count(c.stderr.String(), "damaged or removed while running") == 2
	})
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 30*time.Second)
	if strings.Contains(c.stderr.String(), "panic") {
		t.Errorf("the controller panicked:\n%s", tail(c.stderr.String(), 3000))
	}
	all := testHistory(t, spool)
	for _, p := range []string{"before", "scribbled", "deleted"} {
		if len(all[p]) == 0 {
			t.Errorf("profile %s forgotten: the history holds %v", p, keysOf(all))
		}
	}
}
