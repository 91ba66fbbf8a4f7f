package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExitWhenDoneCountsRefusedManifests: run --exit-when-done exits 1,
// as the README's exit-code table says of a manifest it could not serve,
// when a manifest was refused (another user's file in the spool: it never
// ran) while every task it served is Done, and says how many; the same
// spool without it exits 0.
func TestExitWhenDoneCountsRefusedManifests(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make another user's file (CI runs as root)")
	}
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, dir, "ok.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: ok}\nspec:\n  command: ['true']\n  items: {count: 1}\n")
	theirs := writeManifest(t, dir, "theirs.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: theirs}\nspec:\n  command: ['true']\n  items: {count: 1}\n")
	if err := os.Chown(theirs, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, "run", "--spool", dir, "--exit-when-done", "--load-threshold", "-1", "--log-format", "json")
	if code != 1 || !strings.Contains(out, "1 manifest refused, never run") || !strings.Contains(out, "ignoring manifest") {
		t.Errorf("a refused manifest beside a Done task: exit %d, want 1 saying so:\n%s", code, tail(out, 4000))
	}
	if phaseOf(t, filepath.Join(dir, "ok.yaml")) != "Done" {
		t.Errorf("ok is not Done:\n%s", tail(out, 4000))
	}
	if err := os.Remove(theirs); err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI(t, "run", "--spool", dir, "--exit-when-done", "--load-threshold", "-1", "--log-format", "json"); code != 0 {
		t.Errorf("the same spool without it: exit %d, want 0:\n%s", code, tail(out, 4000))
	}
}
