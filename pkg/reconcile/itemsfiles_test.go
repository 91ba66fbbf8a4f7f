package reconcile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// The items files leave the run directory with their batches: a Done
// task's long list is not kept in the pool of spare files, and the file a
// failed batch kept goes when its task is deleted.
func TestItemsFilesGoWithTheirTask(t *testing.T) {
	h := newHarness(t, Config{})
	h.write("big.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: big}\nspec:\n  command: [sh, -c, 'wc -l $LARDON3D_ITEMS_FILE']\n"+
		"  items: {count: 40000}\n  resources: {batch: {max: 40000}, fixed: {memory: 64Mi}}\n")
	h.write("bad.yaml", manifest("bad", "exit 3", "  retries: 0\n"))
	h.start()
	h.eventually("big Done, bad Failed", func() bool {
		return h.status("big.yaml").Phase == v1alpha1.PhaseDone && h.status("bad.yaml").Phase == v1alpha1.PhaseFailed
	})
	runDir := filepath.Join(h.dir, StateDirName, "run")
	kept := filepath.Join(runDir, "bad.batch-000000.items")
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("the failed batch's items file is not kept for a look: %v", err)
	}
	large := func() []string {
		var out []string
		ents, _ := os.ReadDir(runDir)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && !strings.HasSuffix(e.Name(), ".items") && fi.Size() > 64<<10 {
				out = append(out, e.Name())
			}
		}
		return out
	}
	h.eventually("no large spare items file", func() bool { return len(large()) == 0 })
	if err := os.Remove(filepath.Join(h.dir, "bad.yaml")); err != nil {
		t.Fatal(err)
	}
	h.eventually("bad's kept items file removed with its task", func() bool {
		_, err := os.Stat(kept)
		return os.IsNotExist(err)
	})
}

// A manifest with a second hard link outside the spool: the status is
// written as a new file under the spool's name (an atomic exchange), so
// the outside name keeps the version the user wrote, never a byte of
// status, and is no longer the same file (documented in the README: edit
// the spool's name).
func TestAnOutsideHardLinkKeepsTheUsersVersion(t *testing.T) {
	h := newHarness(t, Config{})
	body := manifest("a", "true", "")
	path := h.write("a.yaml", body)
	outside := filepath.Join(t.TempDir(), "a.yaml")
	if err := os.Link(path, outside); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.eventually("a Done", func() bool { return h.status("a.yaml").Phase == v1alpha1.PhaseDone })
	got, err := os.ReadFile(outside)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != body {
		t.Errorf("the outside name was written through:\n%s", got)
	}
	a, _ := os.Stat(path)
	b, _ := os.Stat(outside)
	if os.SameFile(a, b) {
		t.Error("the spool's name and the outside name are still one file after a status write")
	}
}

// A task's creation time is set when a controller first reads it, kept
// across restarts, and a copy under another name gets its own: AGE counts
// from it.
func TestCreationTimeIsTheFirstReadAndACopyGetsItsOwn(t *testing.T) {
	h := newHarness(t, Config{})
	h.write("a.yaml", manifest("a", "true", ""))
	before := time.Now().Add(-time.Second)
	h.start()
	h.eventually("a Done", func() bool { return h.status("a.yaml").Phase == v1alpha1.PhaseDone })
	a := h.status("a.yaml")
	if a.CreationTime == nil || a.CreationTime.Time.Before(before) || a.StartTime == nil || a.StartTime.Before(a.CreationTime) {
		t.Fatalf("a: creation %v, start %v (controller started after %v)", a.CreationTime, a.StartTime, before)
	}
	time.Sleep(1100 * time.Millisecond) // statuses keep whole seconds
	h.restart()
	data, err := os.ReadFile(filepath.Join(h.dir, "a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	h.write("b.yaml", strings.Replace(string(data), "name: a", "name: b", 1))
	h.eventually("b Done as itself", func() bool {
		st := h.status("b.yaml")
		return st.Phase == v1alpha1.PhaseDone && st.TaskName == "b"
	})
	if got := h.status("a.yaml").CreationTime; got == nil || !got.Equal(a.CreationTime) {
		t.Errorf("a's creation time after a restart: %v, want %v", got, a.CreationTime)
	}
	if b := h.status("b.yaml").CreationTime; b == nil || !b.After(a.CreationTime.Time) {
		t.Errorf("the copy b has creation time %v, want one of its own, after a's %v", b, a.CreationTime)
	}
}
