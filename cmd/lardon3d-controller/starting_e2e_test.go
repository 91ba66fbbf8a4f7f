package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// TestVerbsSayAControllerIsStarting: a controller locks its spool, then
// registers, then answers; in between (a slow start on a busy machine)
// get, describe and wait say that it is starting, naming its PID, and do
// not tell the user to start the one they just started. The lock is held
// here by the test itself, as the controller holds it, with no claim in
// the registry; once released, the verbs say none runs.
func TestVerbsSayAControllerIsStarting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, dir, "a.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: a}\nspec:\n  command: ['true']\n  items: {count: 1}\n")
	lock, err := spool.Lock(dir, filepath.Join(dir, ".lardon3d"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	starting := "the controller on " + dir + " (pid " + pid + ") is starting"
	out, code := runCLI(t, "get", "--spool", dir)
	if code != 0 || !strings.Contains(out, starting) || strings.Contains(out, "no controller is running") || strings.Contains(out, "start one with") {
		t.Errorf("get while a controller starts (exit %d), want %q:\n%s", code, starting, out)
	}
	out, code = runCLI(t, "describe", "a", "--spool", dir)
	if code != 0 || !strings.Contains(out, "pid "+pid+" is starting on this spool") || strings.Contains(out, "none is running") {
		t.Errorf("describe while a controller starts (exit %d):\n%s", code, out)
	}
	out, _ = runCLI(t, "wait", "a", "--for", "phase=Done", "--timeout", "1s", "--spool", dir)
	if !strings.Contains(out, starting) || strings.Contains(out, "no controller is running") {
		t.Errorf("wait while a controller starts, want %q:\n%s", starting, out)
	}
	lock.Unlock()
	out, code = runCLI(t, "get", "--spool", dir)
	if code != 0 || !strings.Contains(out, "no controller is running on "+dir) || strings.Contains(out, "is starting") {
		t.Errorf("get once the lock is gone (exit %d):\n%s", code, out)
	}
}
