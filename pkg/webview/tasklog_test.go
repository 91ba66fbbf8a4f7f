package webview

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// A task's page shows the log where the controller keeps it (its state
// directory), never the file the manifest's status.logFile names: whoever
// writes the manifest would otherwise read any file the view can.
func TestTaskPageReadsTheLogFromTheStateDirectoryOnly(t *testing.T) {
	base := t.TempDir()
	spool, state := filepath.Join(base, "spool"), filepath.Join(base, "state")
	for _, d := range []string{spool, filepath.Join(state, "logs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(base, "shadow")
	if err := os.WriteFile(secret, []byte("root:*:20228:0:99999:7:::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := func(name string) string {
		return "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: " + name + "}\nspec:\n  command: ['true']\n  items: {count: 1}\n" +
			"status:\n  phase: Done\n  taskName: " + name + "\n  logFile: " + secret + "\n"
	}
	for _, name := range []string{"ran", "never"} {
		if err := os.WriteFile(filepath.Join(spool, name+".yaml"), []byte(manifest(name)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(state, "logs", "ran.log"), []byte("=== batch 0 ===\nthe real output\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{spools: []string{spool}}
	for _, name := range []string{"ran", "never"} {
		h.tasks = append(h.tasks, reconcile.TaskView{Spool: spool, File: name + ".yaml", StateDir: state,
			Row: listing.Row{Name: name, Phase: v1alpha1.PhaseDone}})
	}
	srv := httptest.NewServer(As(Viewer{UID: uint32(os.Getuid())}, newTestView(h)))
	defer srv.Close()
	page := func(name string) TaskAnswer {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api/tasks/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", name, resp.Status)
		}
		var a TaskAnswer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := page("ran")
	if strings.Contains(a.Log, "root:") || a.LogFile != filepath.Join(state, "logs", "ran.log") || !strings.Contains(a.Log, "the real output") {
		t.Errorf("ran's page: logFile %q, log %q: want the state directory's log", a.LogFile, a.Log)
	}
	if a := page("never"); strings.Contains(a.Log, "root:") || a.Log != "" {
		t.Errorf("a task without a log shows %q (logFile %q)", a.Log, a.LogFile)
	}
}
