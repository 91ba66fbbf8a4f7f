package spool

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestARewriteOfTheDisplacedVersionThenAnAppendAreBothKept: a writer that
// rewrote the manifest in place through the inode a write-back displaced,
// then appended a line to the new manifest before the keeper merged,
// keeps both: its version, then its line, with the status on top. (In
// TestMixedWritersAgainstStatusWrites under a loaded make test, the
// rewrite went to a conflict copy beside the manifest instead.)
func TestARewriteOfTheDisplacedVersionThenAnAppendAreBothKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.yaml")
	base := manifest("one")
	if err := os.WriteFile(path, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := newTestSpool(t, dir)
	if err := sp.WriteStatus(path, &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, QueueSeq: 7}); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The displaced inode as the writer left it: rewritten in place.
	displaced := filepath.Join(t.TempDir(), "displaced")
	if err := os.WriteFile(displaced, []byte(strings.Replace(base, "echo, one", "echo, two", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(displaced)
	if err != nil {
		t.Fatal(err)
	}
	// Its next edit, before the keeper merged: an append to the manifest.
	if err := appendLine(path, "# appended\n"); err != nil {
		t.Fatal(err)
	}
	sp.settleKept(&kept{path: path, f: f, mode: keepBroken, base: []byte(base), liveUser: sp.userPart(path, written)})
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"echo, two", "# appended\n", "queueSeq: 7"} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("merged manifest lacks %q:\n%s", want, got)
		}
	}
	if bytes.Contains(got, []byte("echo, one")) {
		t.Errorf("merged manifest still holds the version rewritten:\n%s", got)
	}
	if copies, _ := filepath.Glob(filepath.Join(dir, "t.yaml.lardon3d-conflict-*")); len(copies) != 0 {
		t.Errorf("conflict copies %v: want the edits merged", copies)
	}
}
