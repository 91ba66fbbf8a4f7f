package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/internal/testseed"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// envInt reads a positive count from the environment, def when unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// TestKill9DuringManyTinyTasks: the crash guarantee under group commit.
// Many one-item `true` tasks run two at a time while the controller is
// killed with SIGKILL at random moments (fixed seed; LARDON3D_RANDOM_SEED
// for others) and restarted. After every kill each manifest still parses
// (its old or its new version, never a torn one), and what it says was
// committed never goes back: a task seen Done stays Done, itemsDone and
// batchesDone never shrink. The last run ends with every task Done and no
// temp file left. LARDON3D_CRASH_TASKS and LARDON3D_CRASH_KILLS scale it
// (make test: 200 tasks, 3 kills; the bench: 2,000 tasks, 10 kills).
func TestKill9DuringManyTinyTasks(t *testing.T) {
	tasks := envInt(t, "LARDON3D_CRASH_TASKS", 200)
	kills := envInt(t, "LARDON3D_CRASH_KILLS", 3)
	rng := rand.New(rand.NewPCG(testseed.Seeds(t, 15)[0], 0))
	spool := newSpool(t)
	for i := 0; i < tasks; i++ {
		writeManifest(t, spool, fmt.Sprintf("t-%05d.yaml", i), "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n")
	}
	type seen struct {
		done           bool
		items, batches int64
	}
	last := map[string]seen{}
	check := func(when string) (doneCount int) {
		t.Helper()
		ents, err := os.ReadDir(spool)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".yaml") || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			n++
			data, err := os.ReadFile(filepath.Join(spool, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			task, err := v1alpha1.ParseManifest(e.Name(), data)
			if err != nil || task == nil {
				t.Fatalf("%s: %s is corrupt: %v\n%q", when, e.Name(), err, data)
			}
			st := task.Status
			now := seen{done: st.Phase == v1alpha1.PhaseDone, items: st.Progress.ItemsDone, batches: st.Progress.BatchesDone}
			before := last[e.Name()]
			if (before.done && !now.done) || now.items < before.items || now.batches < before.batches {
				t.Fatalf("%s: %s went back from %+v to %+v (phase %s)", when, e.Name(), before, now, st.Phase)
			}
			last[e.Name()] = now
			if now.done {
				doneCount++
			}
		}
		if n != tasks {
			t.Fatalf("%s: %d manifests, want %d", when, n, tasks)
		}
		return doneCount
	}
	// The run takes about tasks × 2 ms; the kills fall anywhere in it,
	// start-up included.
	span := max(300, tasks*2)
	for k := 0; k < kills; k++ {
		c := startController(t, spool)
		time.Sleep(time.Duration(20+rng.IntN(span)) * time.Millisecond)
		_ = c.cmd.Process.Kill()
		c.wait(t, 30*time.Second)
		done := check(fmt.Sprintf("after kill %d", k+1))
		t.Logf("kill %d: %d of %d tasks Done on disk", k+1, done, tasks)
	}
	c := startController(t, spool, "--exit-when-done")
	if code := c.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("final run: exit code %d", code)
	}
	if done := check("after the final run"); done != tasks {
		t.Fatalf("%d of %d tasks Done", done, tasks)
	}
	if rest := leftoverDotfiles(t, spool); len(rest) > 0 {
		t.Fatalf("temp files after a clean stop: %v", rest)
	}
}
