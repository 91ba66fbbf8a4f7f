package kubeapi_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreFresh regenerates the deep-copy functions and the CRD
// with the pinned controller-gen into a temporary directory and fails when a
// committed file differs: run `make generate` after changing a Go type.
func TestGeneratedFilesAreFresh(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go is not on PATH: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(root, "hack", "generate.sh"), out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/generate.sh: %v\n%s", err, b)
	}
	for _, rel := range []string{
		"pkg/apis/v1alpha1/zz_generated.deepcopy.go",
		"pkg/kubeapi/zz_generated.deepcopy.go",
		"deploy/crd/lardon3d.io_tasks.yaml",
	} {
		want, err := os.ReadFile(filepath.Join(out, rel))
		if err != nil {
			t.Fatalf("regenerated %s: %v", rel, err)
		}
		got, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatalf("committed %s: %v", rel, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate` and commit the result", rel)
		}
	}
	// Nothing else is generated: a new file would not be committed.
	entries, err := os.ReadDir(filepath.Join(out, "deploy", "crd"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("controller-gen wrote %d CRD files, want 1 (tasks.lardon3d.io)", len(entries))
	}
}
