package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runInProcess runs the CLI in this process and returns its stdout,
// stderr and exit code.
func runInProcess(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := execute(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestConfigTypoIsShownWithItsLineAndASuggestion(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "budgets.yaml")
	if err := os.WriteFile(cfg, []byte("# budgets\nmaxParalel: 2\nmemoryCapacity: 4GB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runInProcess(t, "budgets", "--spool", dir, "--config", cfg)
	want := "error: --config " + cfg + ": 2 problem(s)\n" +
		"  " + cfg + ":2: maxParalel: unknown field, did you mean maxParallel?\n" +
		"  " + cfg + `:3: memoryCapacity: must be a quantity such as 512Mi, 4Gi or 1.5G (did you mean 4Gi?), got "4GB"` + "\n"
	if code != 2 || stderr != want {
		t.Fatalf("exit %d, stderr\n%s\nwant exit 2 and\n%s", code, stderr, want)
	}
}

func TestConfigOfOnlyCommentsIsTheDefaults(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "budgets.yaml")
	if err := os.WriteFile(cfg, []byte("# nothing yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runInProcess(t, "budgets", "--spool", dir, "--config", cfg); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if err := os.WriteFile(cfg, []byte("- a list\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runInProcess(t, "budgets", "--spool", dir, "--config", cfg); code != 2 || !strings.Contains(stderr, "not a YAML mapping") {
		t.Fatalf("a list as config: exit %d: %s", code, stderr)
	}
}

func TestQuantityFlagErrorsSayTheAcceptedForms(t *testing.T) {
	dir := t.TempDir()
	for flag, sug := range map[string]string{"--memory-capacity": "4Gi (4,294,967,296 bytes)", "--memory-reserved": "512Mi (536,870,912 bytes)"} {
		val := map[string]string{"--memory-capacity": "4GB", "--memory-reserved": "512mb"}[flag]
		_, stderr, code := runInProcess(t, "budgets", "--spool", dir, flag, val)
		if code != 2 || !strings.Contains(stderr, "did you mean "+sug+"?") || !strings.Contains(stderr, "Ki, Mi, Gi") || strings.Contains(stderr, "^") {
			t.Errorf("%s %s: exit %d, %q", flag, val, code, stderr)
		}
	}
}

func TestBudgetsWarnsOfSmallAndCappedMemory(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runInProcess(t, "budgets", "--spool", dir, "--memory-capacity", "1000Ti", "--memory-reserved", "100")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"warning: memoryReserved 100 is only 100 bytes, likely a number missing its unit (did you mean 100Mi or 100Gi?)\n",
		"warning: memoryCapacity 1000Ti is more than this machine has: the memory budget is capped to ",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	_, stderr, _ = runInProcess(t, "budgets", "--spool", dir, "--memory-capacity", "64Mi")
	if strings.Contains(stderr, "warning") {
		t.Errorf("a capacity below the machine's warned: %s", stderr)
	}
}

// TestControllerLogsLikelyMistakes: the controller says so when a manifest
// asks for 100 bytes per thread or the capacity asked exceeds the machine.
func TestControllerLogsLikelyMistakes(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "small.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: ["true"]
  items: {count: 1}
  resources:
    perThread: {memory: 100}
`)
	c := startController(t, spool, "--exit-when-done", "--memory-capacity", "1000Ti")
	if code := c.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d", code)
	}
	log := c.stderr.String()
	for _, want := range []string{
		`"task":"small"`,
		`"field":"spec.resources.perThread.memory"`,
		`"message":"spec.resources.perThread.memory: is only 100 bytes, likely a number missing its unit (did you mean 100Mi or 100Gi?)"`,
		`"message":"memoryCapacity 1000Ti is more than this machine has: the memory budget is capped to `,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	// Once, though the controller rewrites the file's status several times.
	if n := strings.Count(log, "likely a number missing its unit"); n != 1 {
		t.Errorf("the warning was logged %d times, want once", n)
	}
}

func TestLogsOfATaskThatHasNotStartedSaysWhy(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "wait.yaml", strings.ReplaceAll(validManifest, "%NAME%", "wait")+`status:
  phase: Pending
  logFile: `+spool+`/.lardon3d/logs/wait.log
  conditions:
  - {type: Admitted, status: "False", reason: CPUPressure, message: busy, lastTransitionTime: "2026-12-01T10:00:00Z"}
`)
	_, stderr, code := runInProcess(t, "logs", "--spool", spool, "wait")
	if code != 1 || stderr != "error: task wait has no log yet (phase Pending, CPUPressure): no batch has started\n" {
		t.Fatalf("exit %d %q", code, stderr)
	}
}
