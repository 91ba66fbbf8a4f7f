package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestStatusWritesThatFailAreRetriedUntilDone makes the manifest immutable
// (chattr +i: every write-back fails with EPERM, as on a read-only or full
// file system) for two seconds in the middle of a run: the batches go on,
// the failure is visible in describe, and once the file is writable again it
// ends Done with every committed batch.
func TestStatusWritesThatFailAreRetriedUntilDone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for chattr +i (CI runs as root)")
	}
	spool := newSpool(t)
	out := filepath.Join(t.TempDir(), "out")
	path := writeManifest(t, spool, "t.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec:\n"+
		"  command: [sh, -c, 'echo $LARDON3D_BATCH_START >> "+out+"; sleep 0.1']\n  items: {count: 30}\n  resources: {batch: {max: 1}}\n")
	c := startController(t, spool, "--exit-when-done")
	eventually(t, 30*time.Second, "running", func() bool { return phaseOf(t, path) == v1alpha1.PhaseRunning })
	if b, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Fatalf("chattr +i: %v %s", err, b)
	}
	immutable := true
	defer func() {
		if immutable {
			_ = exec.Command("chattr", "-i", path).Run()
		}
	}()
	before := readTask(t, path).Status.Progress.ItemsDone
	time.Sleep(1200 * time.Millisecond)
	desc, _ := runCLI(t, "describe", "t", "--spool", spool)
	time.Sleep(800 * time.Millisecond)
	if b, err := exec.Command("chattr", "-i", path).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v %s", err, b)
	}
	immutable = false
	if !strings.Contains(desc, "Status write:") || !strings.Contains(desc, "operation not permitted") {
		t.Errorf("describe does not show the failing writes:\n%s", desc)
	}
	if code := c.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	st := readTask(t, path).Status
	if st.Phase != v1alpha1.PhaseDone || st.Progress.ItemsDone != 30 || st.Progress.BatchesDone != 30 {
		t.Fatalf("final status: %s, %d items, %d batches", st.Phase, st.Progress.ItemsDone, st.Progress.BatchesDone)
	}
	data, _ := os.ReadFile(out)
	if n := len(strings.Fields(string(data))); n < 30 || before >= 30 {
		t.Fatalf("%d batches ran (progress %d when the file became immutable)", n, before)
	}
	if !strings.Contains(c.stderr.String(), "status not written; retrying") || !strings.Contains(c.stderr.String(), "status written after failures") {
		t.Errorf("the log does not tell the failures and the recovery")
	}
}
