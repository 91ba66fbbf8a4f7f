package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// The end-to-end tests run the real binaries on real spools. They find the
// binaries in $LARDON3D_BIN (set by `make test`) or build them once.

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

func binaries(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if d := os.Getenv("LARDON3D_BIN"); d != "" {
			binDir = d
			return
		}
		dir, err := os.MkdirTemp("", "lardon3d-e2e-bin")
		if err != nil {
			binErr = err
			return
		}
		// Built as make build builds them: static (CGO_ENABLED=0).
		goBuild := func(args ...string) ([]byte, error) {
			cmd := exec.Command("go", append([]string{"build"}, args...)...)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			return cmd.CombinedOutput()
		}
		out, err := goBuild("-o", dir+"/", "github.com/lardon3d/lardon3d-controller/cmd/...")
		if err == nil {
			out, err = goBuild("-tags", "lardon3d_node", "-o", filepath.Join(dir, nodeBinary), "github.com/lardon3d/lardon3d-controller/cmd/lardon3d-controller")
		}
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
		binDir = dir
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	for _, b := range []string{"lardon3d-controller", nodeBinary, "lardon3d-synth"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			t.Fatalf("binary %s missing in %s: %v", b, binDir, err)
		}
	}
	return binDir
}

// newSpool makes a private spool directory.
func newSpool(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeManifest(t testing.TB, dir, file, body string) string {
	t.Helper()
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// controller is a running controller process.
type controller struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

func startController(t testing.TB, spool string, args ...string) *controller {
	t.Helper()
	return startControllerUnder(t, nil, spool, args...)
}

// startControllerUnder is startController with the controller started by
// wrapper (a command that execs its arguments, such as prlimit; nil:
// none).
func startControllerUnder(t testing.TB, wrapper []string, spool string, args ...string) *controller {
	t.Helper()
	bin := binaries(t)
	// The test suite itself loads the machine (packages run in parallel):
	// load-average deferral is the governor's business, tested there.
	full := append([]string{"run", "--spool", spool, "--log-format", "json", "--kill-grace", "2s", "--load-threshold", "-1"}, args...)
	argv := append(append(append([]string{}, wrapper...), filepath.Join(bin, "lardon3d-controller")), full...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = isolated(append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH")), spool)
	return launch(t, cmd, afterController(t, spool, full))
}

// launch starts cmd as one of the test's controllers: its output kept, its
// exit code recorded; when the test ends it is killed and waited for, then
// after runs (nil: nothing).
func launch(t testing.TB, cmd *exec.Cmd, after func(*controller)) *controller {
	t.Helper()
	c := &controller{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr, cmd.Stdout = c.stderr, c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		c.code = cmd.ProcessState.ExitCode()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
		if after != nil {
			after(c)
		}
	})
	return c
}

// afterController is launch's after for a controller on spool started
// with the arguments full: what its batches left is removed, as a restart
// would, and its output logged when the test failed.
func afterController(t testing.TB, spool string, full []string) func(*controller) {
	return func(c *controller) {
		if tree, err := openCgroups("auto", "", stateDirOf(spool, full), zerolog.Nop()); err == nil && tree != nil {
			_, _ = runner.KillLeftoverCgroups(tree)
			_ = tree.Remove()
		}
		if t.Failed() {
			t.Logf("controller output:\n%s", tail(c.stderr.String(), 6000))
		}
	}
}

// stateDirOf returns the state directory a controller started with args
// uses.
func stateDirOf(spool string, args []string) string {
	for i, a := range args {
		if a == "--state-dir" && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--state-dir="); ok {
			return v
		}
	}
	return filepath.Join(spool, ".lardon3d")
}

// isolated is the environment of a controller, or of a verb, on spool:
// the machine's state (its learned history) and its registry of running
// controllers are the test's own, next to the spool, so that tests running
// in parallel are machines of their own.
func isolated(env []string, spool string) []string {
	base := filepath.Dir(spool)
	for hasMeta(base) { // a pattern of spools: where they are
		base = filepath.Dir(base)
	}
	return append(env, "XDG_STATE_HOME="+filepath.Join(base, "machine-state"), "LARDON3D_RUN_DIR="+filepath.Join(base, "machine-run"))
}

// testHistoryPath is the learned history of an isolated controller on spool.
func testHistoryPath(spool string) string {
	return filepath.Join(filepath.Dir(spool), "machine-state", "lardon3d", history.FileName)
}

// testHistory reads every batch the learned history of an isolated
// controller on spool holds, by profile.
func testHistory(t *testing.T, spool string) map[string][]history.Record {
	t.Helper()
	s, err := history.Open(testHistoryPath(spool), history.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// syncBuffer is a bytes.Buffer safe to read while the process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// wait waits for the controller to exit and returns its exit code.
func (c *controller) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-c.done:
		return c.code
	case <-time.After(timeout):
		t.Fatalf("controller still running after %s", timeout)
		return -1
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// readTask reads a manifest's task (spec and status).
func readTask(t *testing.T, path string) *v1alpha1.Task {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	task, err := v1alpha1.ParseManifest(filepath.Base(path), data)
	if task == nil {
		t.Fatalf("%s: %v", path, err)
	}
	return task
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func phaseOf(t *testing.T, path string) v1alpha1.Phase {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	task, _ := v1alpha1.ParseManifest(filepath.Base(path), data)
	if task == nil {
		return ""
	}
	return task.Status.Phase
}

func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), args...)
	for i, a := range args {
		if a == "--spool" && i+1 < len(args) {
			cmd.Env = isolated(os.Environ(), args[i+1])
		}
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = cmd.ProcessState.ExitCode()
	}
	return string(out), code
}
