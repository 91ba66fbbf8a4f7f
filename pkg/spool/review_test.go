package spool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// review: a deferred write-back retried by the spool's retry goroutine must
// never put back a status older than one the controller wrote since. The
// retry reads its edit, then waits for the path lock; the controller's
// WriteStatus holds that lock, writes a newer status and drops the deferred
// edit; the retry then wrote the stale one over it, and the controller,
// whose write landed, never writes again.
func TestReviewDeferredRetryNeverWritesAnOlderStatus(t *testing.T) {
	h := newHarness(t, nil)
	h.write("t.yaml", manifest("a"))
	h.expect(Added, "t")
	abs := h.path("t.yaml")
	sp := h.sp
	older := &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, Progress: v1alpha1.Progress{ItemsTotal: 6, ItemsDone: 3}}
	newer := &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseDone, Progress: v1alpha1.Progress{ItemsTotal: 6, ItemsDone: 6}}
	if !sp.deferEdit(abs, func(b []byte) ([]byte, error) { return ReplaceStatus(b, older) }) {
		t.Fatal("deferEdit refused while Run runs")
	}
	// The controller's WriteStatus(newer) is under way: it holds the path lock.
	l := sp.lock(abs)
	done := make(chan struct{})
	go func() { defer close(done); sp.retryDeferred(abs) }()
	deadline := time.Now().Add(waitFor)
	for {
		sp.mu.Lock()
		refs := sp.locks[abs].refs
		sp.mu.Unlock()
		if refs >= 2 {
			break // the retry waits for the lock
		}
		if time.Now().After(deadline) {
			t.Fatal("the retry never asked for the path lock")
		}
		time.Sleep(time.Millisecond)
	}
	// What editAs does under the lock for WriteStatus(newer).
	edit := func(b []byte) ([]byte, error) { return ReplaceStatus(b, newer) }
	sp.mu.Lock()
	sp.lastEdit[abs] = edit
	sp.mu.Unlock()
	if err := sp.editFile(abs, edit); err != nil {
		t.Fatal(err)
	}
	sp.mu.Lock()
	delete(sp.deferred, abs)
	sp.mu.Unlock()
	sp.unlock(abs, l)
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatal("retry did not return")
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		t.Fatal(err)
	}
	task, _ := v1alpha1.ParseManifest("t.yaml", data)
	if task == nil {
		t.Fatalf("does not parse:\n%s", data)
	}
	if task.Status.Phase != v1alpha1.PhaseDone || task.Status.Progress.ItemsDone != 6 {
		t.Errorf("the file holds the older status (phase %s, %d items done) over the newer one the controller wrote (Done, 6):\n%s",
			task.Status.Phase, task.Status.Progress.ItemsDone, data)
	}
}

// review: a rename onto a file that already holds a task of the same
// metadata.name (a.yaml owns "job", b.yaml is its duplicate; mv a.yaml
// b.yaml) is a rename: the task moves to b.yaml. It was taken for a
// modification of b.yaml, and a.yaml's deletion was emitted at the end of
// the grace period, which cancels the running task.
func TestReviewRenameOntoAFileOfTheSameName(t *testing.T) {
	h := newHarness(t, nil)
	named := func(cmd string) string {
		return "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: job\nspec:\n  command: [echo, " + cmd + "]\n  items: {count: 1}\n"
	}
	h.write("a.yaml", named("a"))
	h.expect(Added, "a")
	h.write("b.yaml", named("b"))
	h.expect(Added, "b")
	if err := os.Rename(h.path("a.yaml"), h.path("b.yaml")); err != nil {
		t.Fatal(err)
	}
	for {
		var ev Event
		select {
		case ev = <-h.sp.Events():
		case <-time.After(waitFor):
			t.Fatal("no event after mv a.yaml b.yaml")
		}
		if ev.Type == Deleted && ev.Name == "b" {
			continue // b.yaml's own version is gone: fine before the rename
		}
		if ev.Type != Renamed || ev.Name != "b" || ev.OldPath != h.path("a.yaml") {
			t.Fatalf("after mv a.yaml b.yaml: got %v %s (old path %q), want Renamed b from a.yaml", ev.Type, ev.Name, ev.OldPath)
		}
		break
	}
	h.clock.Step(2 * DefaultDeleteGrace)
	h.barrier("b1") // fails on a Deleted a
}

// review: a write-back of a manifest reached through a symlink writes its
// dotfile beside the link's target (writeTemp in the target's directory),
// so a controller killed with -9 may leave it there; Run removes leftovers
// from the spool directory only, and this one stays for good.
func TestReviewLeftoversBesideASymlinkedManifestAreRemoved(t *testing.T) {
	leftover := filepath.Join("sub", ".real.yaml.lardon3d-0123456789ab.tmp")
	var dir string
	h := newHarness(t, func(d string) {
		dir = d
		if err := os.Mkdir(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "sub", "real.yaml"), []byte(manifest("a")), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("sub/real.yaml", filepath.Join(d, "a.yaml")); err != nil {
			t.Fatal(err)
		}
		// What a write-back of a.yaml killed between its dotfile and its swap leaves.
		if err := os.WriteFile(filepath.Join(d, leftover), []byte(manifest("a")), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	h.expect(Added, "a")
	h.expect(Synced, "")
	if _, err := os.Lstat(filepath.Join(dir, leftover)); err == nil {
		t.Errorf("%s left after start-up", leftover)
	}
}

// A user's version a write-back must keep (a failed swap-back, or two
// writers replacing the file at once) is renamed out of the temp-file
// pattern, so the next start-up's clean-up does not delete it.
func TestAKeptVersionIsNotALeftover(t *testing.T) {
	dir := t.TempDir()
	tmp := ".t.yaml.lardon3d-0123456789ab.tmp"
	if err := os.WriteFile(filepath.Join(dir, tmp), []byte("the user's newer text\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !tmpPattern.MatchString(tmp) {
		t.Fatalf("%s does not look like a leftover: the test is wrong", tmp)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	name := keepAside(int(d.Fd()), "t.yaml", tmp)
	if name == tmp || tmpPattern.MatchString(name) || !strings.HasPrefix(name, "t.yaml.lardon3d-conflict-") {
		t.Fatalf("kept as %q", name)
	}
	got, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil || string(got) != "the user's newer text\n" {
		t.Fatalf("kept version: %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, tmp)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temp name is still there: %v", err)
	}
}
