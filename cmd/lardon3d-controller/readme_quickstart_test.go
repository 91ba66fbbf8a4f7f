package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestREADMEQuickStart runs the README's "Your first task" block as
// written, with sh -e, in a directory laid out as the repository root is
// (bin/ and examples/tasks/) and a HOME of its own: the quick start must
// end with the task Done and its files gzipped, within the README's first
// 40 lines, below the two commands.
func TestREADMEQuickStart(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	head := strings.Join(strings.SplitN(readme, "\n", 41)[:40], "\n")
	if !strings.Contains(head, "make run ") || !strings.Contains(head, "make test ") {
		t.Errorf("the README's first lines lose `make run` and `make test`")
	}
	_, block, ok := strings.Cut(head, "## Your first task\n")
	if ok {
		_, block, ok = strings.Cut(block, "```sh\n")
	}
	if ok {
		block, _, ok = strings.Cut(block, "```\n")
	}
	if !ok {
		t.Fatal("no complete ```sh block under \"## Your first task\" in the README's first 40 lines")
	}

	root, home := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	examples, _ := filepath.Abs("../../examples/tasks")
	for link, target := range map[string]string{"bin": binaries(t), "examples/tasks": examples} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", block)
	cmd.Dir = root
	// The machine's registry and state are the test's own: other tests
	// start controllers at the same time (one per machine is the rule).
	cmd.Env = append(os.Environ(), "HOME="+home, "LARDON3D_SPOOL=", "XDG_STATE_HOME="+filepath.Join(home, ".local", "state"), "LARDON3D_RUN_DIR="+filepath.Join(home, "run"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, out)
	}
	for _, want := range []string{"condition met", "created"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, out)
		}
	}
	gz, _ := filepath.Glob(filepath.Join(home, "first/files/*.yaml.gz"))
	yamls, _ := filepath.Glob(filepath.Join(examples, "*.yaml"))
	if len(gz) != len(yamls) || len(gz) == 0 {
		t.Errorf("%d files gzipped, want %d", len(gz), len(yamls))
	}
}
