package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeVerbRunsTheCompanion: the default binary's node verb runs the
// companion binary beside it with the same arguments (its help is the
// agent's own), and without a companion says which binary is missing and
// how to build it, exit code 2. The default binary links no client-go
// but its jsonpath.
func TestNodeVerbRunsTheCompanion(t *testing.T) {
	bin := binaries(t)
	out, err := exec.Command(filepath.Join(bin, "lardon3d-controller"), "node", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--lease-duration") {
		t.Errorf("node --help through the companion: %v\n%s", err, out)
	}
	lonely := t.TempDir()
	data, err := os.ReadFile(filepath.Join(bin, "lardon3d-controller"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lonely, "lardon3d-controller"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(lonely, "lardon3d-controller"), "node", "--kubeconfig", "x")
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
	out, _ = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(out), nodeBinary) || !strings.Contains(string(out), "make build") {
		t.Errorf("node without its companion: exit %d, output:\n%s", code, out)
	}
	// Of client-go, get -o jsonpath's two small packages alone.
	deps, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, deps)
	}
	allowed := map[string]bool{"k8s.io/client-go/util/jsonpath": true, "k8s.io/client-go/third_party/forked/golang/template": true}
	for _, pkg := range strings.Fields(string(deps)) {
		if (strings.HasPrefix(pkg, "k8s.io/client-go/") && !allowed[pkg]) || strings.HasPrefix(pkg, "sigs.k8s.io/controller-runtime") {
			t.Errorf("the default binary links %s", pkg)
		}
	}
}
