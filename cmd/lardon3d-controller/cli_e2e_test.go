package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// The end-to-end tests of the kubectl-like verbs and flags of issue 16.

// TestVersionPrintsModuleVersionAndCommit compares --version with what
// `go version -m` reads from the same binary.
func TestVersionPrintsModuleVersionAndCommit(t *testing.T) {
	bin := filepath.Join(binaries(t), "lardon3d-controller")
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	info := &debug.BuildInfo{}
	for _, line := range strings.Split(string(meta), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod":
			info.Main.Version = f[2]
		case len(f) >= 2 && f[0] == "build":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				info.Settings = append(info.Settings, debug.BuildSetting{Key: k, Value: v})
			}
		}
	}
	want := "lardon3d-controller " + formatVersion(info) + "\n"
	out, code := runCLI(t, "--version")
	// make build stamps the revision that Go did not record (a worktree).
	stamped := regexp.MustCompile(`^lardon3d-controller \(devel\) \(commit [0-9a-f]{40}(, modified)?\)\n$`)
	if code != 0 || (out != want && !(want == "lardon3d-controller (devel)\n" && stamped.MatchString(out))) {
		t.Fatalf("--version: exit %d, output %q; want exit 0, %q", code, out, want)
	}
}

func TestFormatVersion(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		info debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{}, "(devel)"},
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}}},
			fmt.Sprintf("v1.2.3 (commit %s)", rev)},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}},
			fmt.Sprintf("(devel) (commit %s, modified)", rev)},
	} {
		if got := formatVersion(&c.info); got != c.want {
			t.Errorf("formatVersion(%+v) = %q, want %q", c.info, got, c.want)
		}
	}
	// The revision make build stamps, where Go recorded none; never over
	// Go's own.
	devel := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	if got, want := formatVersion(withStampedRevision(devel, rev, "true")), fmt.Sprintf("(devel) (commit %s, modified)", rev); got != want {
		t.Errorf("stamped: %q, want %q", got, want)
	}
	if got, want := formatVersion(withStampedRevision(devel, rev, "")), fmt.Sprintf("(devel) (commit %s)", rev); got != want {
		t.Errorf("stamped clean: %q, want %q", got, want)
	}
	recorded := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}
	if got := formatVersion(withStampedRevision(recorded, rev, "true")); got != "(devel) (commit abc)" {
		t.Errorf("stamped over Go's revision: %q", got)
	}
}

// startCLI starts the CLI in the background; its output is read while it
// runs, its exit code from the returned channel.
func startCLI(t *testing.T, args ...string) (*syncBuffer, <-chan int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		_ = cmd.Wait()
		done <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return out, done
}

func TestLogsPrintsTailsAndFollowsTheTaskLog(t *testing.T) {
	spool := newSpool(t)
	gate := filepath.Join(t.TempDir(), "gate")
	path := writeManifest(t, spool, "talker.yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'echo one; echo two; while [ ! -e %s ]; do sleep 0.05; done; echo three']
  items: {count: 1}
`, gate))
	startController(t, spool)
	var logFile string
	eventually(t, 30*time.Second, "the task to run and print two lines", func() bool {
		task := readTask(t, path)
		logFile = task.Status.LogFile
		data, _ := os.ReadFile(logFile)
		return task.Status.Phase == v1alpha1.PhaseRunning && strings.HasSuffix(string(data), "one\ntwo\n")
	})
	header, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI(t, "logs", "talker", "--spool", spool); code != 0 || out != string(header) {
		t.Fatalf("logs: exit %d, output %q; want exit 0, the log file %q", code, out, header)
	}
	for n, want := range map[string]string{"0": "", "1": "two\n", "2": "one\ntwo\n"} {
		if out, code := runCLI(t, "logs", "talker", "--tail", n, "--spool", spool); code != 0 || out != want {
			t.Errorf("logs --tail %s: exit %d, output %q; want exit 0, %q", n, code, out, want)
		}
	}

	out, done := startCLI(t, "logs", "-f", "talker", "--spool", spool)
	eventually(t, 10*time.Second, "logs -f to print the log so far", func() bool { return out.String() == string(header) })
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("logs -f: exit %d: %s", code, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("logs -f still following 30 s after the task was let go; printed %q", out)
	}
	if p := phaseOf(t, path); p != v1alpha1.PhaseDone {
		t.Fatalf("logs -f returned with the task %s", p)
	}
	final, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(final), "one\ntwo\nthree\n=== batch 0 ended: ") {
		t.Fatalf("log file does not end the batch as expected: %q", final)
	}
	if out.String() != string(final) {
		t.Fatalf("logs -f printed %q, want the whole log %q", out, final)
	}
}

func TestDeleteRemovesManifestsAndRefusesUnknownNames(t *testing.T) {
	spool := newSpool(t)
	const long = `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, "sleep 60 & wait"]
  items: {count: 1}
  resources: {threads: 1}
`
	runner := writeManifest(t, spool, "runner.yaml", long)
	other := writeManifest(t, spool, "other.yaml", strings.Replace(long, "sleep 60", "sleep 61", 1))
	startController(t, spool, "--delete-grace", "500ms")
	var pgid int
	eventually(t, 30*time.Second, "runner to run", func() bool {
		task := readTask(t, runner)
		if task.Status.Phase == v1alpha1.PhaseRunning && task.Status.ProcessGroup != nil {
			pgid = task.Status.ProcessGroup.PGID
			return len(groupMembers(pgid)) > 0
		}
		return false
	})

	// One unknown name: nothing is deleted, and the likely name is offered.
	out, code := runCLI(t, "delete", "other", "runer", "--spool", spool)
	want := fmt.Sprintf("error: no task %q in %s; did you mean %q?\n", "runer", spool, "runner")
	if code != 1 || out != want {
		t.Fatalf("delete other runer: exit %d, output %q; want exit 1, %q", code, out, want)
	}
	for _, p := range []string{runner, other} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a refused delete removed %s: %v", p, err)
		}
	}
	out, code = runCLI(t, "delete", "nothing-like-it", "--spool", spool)
	if want := fmt.Sprintf("error: no task %q in %s\n", "nothing-like-it", spool); code != 1 || out != want {
		t.Fatalf("delete nothing-like-it: exit %d, output %q; want exit 1, %q", code, out, want)
	}

	out, code = runCLI(t, "delete", "runner", "other", "runner", "--spool", spool)
	if want := "task runner deleted (runner.yaml)\ntask other deleted (other.yaml)\n"; code != 0 || out != want {
		t.Fatalf("delete runner other runner: exit %d, output %q; want exit 0, %q", code, out, want)
	}
	for _, p := range []string{runner, other} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still there after delete: %v", p, err)
		}
	}
	eventually(t, 20*time.Second, "the deleted task's processes to be cancelled", func() bool { return len(groupMembers(pgid)) == 0 })
	if out, code := runCLI(t, "get", "--spool", spool); code != 0 || out != "NAME   PHASE   PROGRESS   BATCH   MEMORY   AGE   REASON\n" {
		t.Fatalf("get after delete: exit %d, output %q", code, out)
	}
}

func TestUnknownTaskNamesGetADidYouMean(t *testing.T) {
	spool := newSpool(t)
	const body = `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, "true"]
  items: {count: 1}
`
	features := writeManifest(t, spool, "features.yaml", body)
	writeManifest(t, spool, "matching.yaml", body)
	near := fmt.Sprintf("error: no task %q in %s; did you mean %q?\n", "featurs", spool, "features")
	far := fmt.Sprintf("error: no task %q in %s\n", "reconstruction", spool)
	for _, verb := range [][]string{{"describe"}, {"pause"}, {"resume"}, {"logs"}, {"logs", "-f"}, {"get"}, {"delete"}} {
		for name, want := range map[string]string{"featurs": near, "reconstruction": far} {
			args := append(append([]string{}, verb...), name, "--spool", spool)
			if out, code := runCLI(t, args...); code != 1 || out != want {
				t.Errorf("%s: exit %d, output %q; want exit 1, %q", strings.Join(args, " "), code, out, want)
			}
		}
	}
	if data, err := os.ReadFile(features); err != nil || string(data) != body {
		t.Fatalf("a refused verb touched features.yaml: %v\n%s", err, data)
	}
}

func TestNamesAsGetONamePrintsThemAreAccepted(t *testing.T) {
	spool := newSpool(t)
	const body = `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, "true"]
  items: {count: 1}
`
	writeManifest(t, spool, "features.yaml", body)
	writeManifest(t, spool, "matching.yaml", body)
	if out, code := runCLI(t, "describe", "task/features", "--spool", spool); code != 0 || !strings.HasPrefix(out, "Name:        features\n") {
		t.Errorf("describe task/features: exit %d, output %q", code, out)
	}
	if out, code := runCLI(t, "get", "task/matching", "-o", "name", "--spool", spool); code != 0 || out != "task/matching\n" {
		t.Errorf("get task/matching -o name: exit %d, output %q", code, out)
	}
	names, code := runCLI(t, "get", "-o", "name", "--spool", spool)
	if code != 0 {
		t.Fatalf("get -o name: exit %d: %s", code, names)
	}
	args := append([]string{"delete", "--spool", spool}, strings.Fields(names)...)
	if out, code := runCLI(t, args...); code != 0 || out != "task features deleted (features.yaml)\ntask matching deleted (matching.yaml)\n" {
		t.Errorf("delete $(get -o name): exit %d, output %q", code, out)
	}
}
