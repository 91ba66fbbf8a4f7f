package reconcile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestExitWhenDoneWaitsForAManifestStillBeingWritten is the attack of
// issue 32: a manifest still open for writing at start (a slow `curl >
// x.yaml`) made --exit-when-done see an empty spool and exit 0 at once,
// the task never run. The controller waits for the writer to finish,
// runs the task, then exits.
func TestExitWhenDoneWaitsForAManifestStillBeingWritten(t *testing.T) {
	h := newHarness(t, Config{ExitWhenDone: true})
	body := manifest("slow", "true", "")
	f, err := os.OpenFile(filepath.Join(h.dir, "slow.yaml"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(body[:len(body)/2]); err != nil {
		t.Fatal(err)
	}
	h.start()
	// The old controller exited within 60 ms; give it far longer.
	select {
	case <-h.done:
		t.Fatal("the controller exited while a manifest was still being written")
	case <-time.After(1500 * time.Millisecond):
	}
	if _, err := f.WriteString(body[len(body)/2:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out := h.wait()
	if len(out.Tasks) != 1 || out.Tasks[0].Status.Phase != v1alpha1.PhaseDone || !out.AllDone {
		t.Fatalf("outcome %+v, want the slow task Done", out)
	}
}

// TestACancelledBatchEndsBeforeItsTaskStartsAgain is the attack of issue
// 32: a batch that ignores SIGTERM is cancelled (its manifest's name
// changed away), the task comes back at once (the name changed back):
// the new generation's batch starts only once the cancelled one's
// processes are gone (after the kill grace), never beside them.
func TestACancelledBatchEndsBeforeItsTaskStartsAgain(t *testing.T) {
	h := newHarness(t, Config{})
	starts := filepath.Join(t.TempDir(), "starts")
	// $$$$ is the shell's $$: the command expands $$ to $.
	stubborn := func(name string) string {
		return strings.Replace(manifest(name, `trap "" TERM; echo $$$$ >> `+starts+`; sleep 30`, ""), "count: 4", "count: 1", 1)
	}
	h.write("a.yaml", stubborn("a"))
	h.start()
	pids := func() []string {
		data, _ := os.ReadFile(starts)
		return strings.Fields(string(data))
	}
	h.eventually("the first batch running", func() bool { return len(pids()) == 1 })
	first := pids()[0]
	h.write("a.yaml", manifest("b", "true", "")) // a is cancelled: SIGTERM, ignored
	h.eventually("b Done", func() bool { return h.status("a.yaml").Phase == v1alpha1.PhaseDone })
	h.write("a.yaml", stubborn("a")) // a again, a new task of the same name
	h.eventually("the second batch running", func() bool { return len(pids()) == 2 })
	if _, err := os.Stat("/proc/" + first); err == nil {
		t.Fatalf("the second batch of a started while the cancelled one (pid %s) still ran", first)
	}
}
