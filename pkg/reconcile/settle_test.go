package reconcile

import (
	"os"
	"path/filepath"
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
