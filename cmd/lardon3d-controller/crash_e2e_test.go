package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// crashRun runs three tasks of 24 items (batches of at most 3) on a fresh
// spool, kills the controller with SIGKILL after each of kills, restarts it,
// lets the last run finish, and returns how many times each item completed
// ("task index" → count). Each batch starts a long-lived background process
// under a marker name (a leftover if the controller dies mid-batch) and
// records its items in a ledger only when it completes.
func crashRun(t *testing.T, kills []time.Duration) map[string]int {
	t.Helper()
	spool := newSpool(t)
	tmp := t.TempDir()
	ledger := filepath.Join(tmp, "ledger")
	marker := filepath.Join(tmp, "lardon3d-e2e-crash-marker")
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleepBin, marker); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		writeManifest(t, spool, name+".yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, '"$0" 30 & sleep 0.2; sed "s/^/$LARDON3D_TASK /" "$LARDON3D_ITEMS_FILE" >> %s; kill $!', %s]
  items: {count: 24}
  resources:
    batch: {min: 1, max: 3}
`, ledger, marker))
	}
	for _, after := range kills {
		c := startController(t, spool)
		time.Sleep(after) // let it run for a while: the point is to kill it mid-way
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
	}
	c := startController(t, spool, "--exit-when-done")
	if code := c.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("final run: exit code %d", code)
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if p := phaseOf(t, filepath.Join(spool, name+".yaml")); p != v1alpha1.PhaseDone {
			t.Errorf("%s: phase %s", name, p)
		}
	}
	// No leftover process: nothing carries the marker any more.
	leftovers := func() []string {
		var found []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && bytes.HasPrefix(cmdline, []byte(marker+"\x00")) {
				stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
				found = append(found, string(stat))
			}
		}
		return found
	}
	deadline := time.Now().Add(5 * time.Second)
	for left := leftovers(); len(left) > 0; left = leftovers() {
		if time.Now().After(deadline) {
			t.Fatalf("leftover batch processes:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	data, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		counts[line]++
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		for i := 0; i < 24; i++ {
			if n := counts[fmt.Sprintf("%s %d", name, i)]; n < 1 {
				t.Errorf("%s item %d never ran", name, i)
			}
		}
	}
	return counts
}

// TestCrashResume: after one kill -9 at an arbitrary moment and a restart,
// everything ends Done, every item ran once or twice (only the batch in
// flight runs again), and no process of the old controller's batches is
// left.
func TestCrashResume(t *testing.T) {
	for item, n := range crashRun(t, []time.Duration{700 * time.Millisecond}) {
		if n > 2 {
			t.Errorf("%s ran %d times, want 1 or 2", item, n)
		}
	}
}

// TestRepeatedCrashes: four kills at several points. Each crash may re-run
// the batch in flight of each running task (two run at once on two CPUs,
// at most 3 items a batch), never more: the re-runs stay within that bound.
func TestRepeatedCrashes(t *testing.T) {
	kills := []time.Duration{400 * time.Millisecond, 900 * time.Millisecond, 250 * time.Millisecond, 1300 * time.Millisecond}
	extra := 0
	for _, n := range crashRun(t, kills) {
		extra += n - 1
	}
	if bound := len(kills) * 2 * 3; extra > bound {
		t.Errorf("%d re-runs of items over %d crashes, want at most %d (one batch of 3 per running task per crash)", extra, len(kills), bound)
	}
}
