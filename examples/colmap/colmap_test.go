// Package colmap_test runs a real COLMAP reconstruction through
// lardon3d-controller, end to end: examples/colmap/demo.sh renders 24 views
// at 320x240, runs the four manifests of tasks/ through
// `lardon3d-controller run --exit-when-done`, and scores the model.
//
// TestCrashResume kills the controller (SIGKILL) while a feature-extraction
// batch is in flight, restarts it, and checks that the pipeline still ends
// Done with a good model and that the orphaned batch's processes are gone.
//
// TestClassExamples (classes_test.go) runs the class examples of
// examples/tasks/classes and checks their effects; TestEveryExampleIsRun
// keeps every manifest under examples/ covered by such a test.
//
// They run only where `colmap` is on PATH (CI installs it; under CI a
// missing tool fails them) and not with -short. The controller is $LARDON3D_CONTROLLER, or built from
// ./cmd/lardon3d-controller. LARDON3D_COLMAP_DIRECT=1 runs the first test's
// manifests with directrun instead (and skips the second).
package colmap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// summary is evaluate's line.
var summary = regexp.MustCompile(`registered (\d+)/(\d+), points (\d+), mean camera-centre error ([0-9.]+)% of radius`)

// loadFlags keeps the governor's load gate from holding the pipeline back
// for minutes under `make test`, where other packages' tests load the machine.
func loadFlags() string {
	if f := os.Getenv("CONTROLLER_FLAGS"); f != "" {
		return f
	}
	return "--load-threshold -1"
}

// requireColmap skips the test in -short mode, or where colmap or one of
// the other tools is not on PATH; under CI (CI set), where .ci/run installs
// them all, a missing tool fails it.
func requireColmap(t *testing.T, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping the COLMAP end-to-end test in -short mode")
	}
	for _, tool := range append([]string{"colmap"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("%s is not on PATH: .ci/run installs it (apt-get install -y colmap sqlite3 libimage-exiftool-perl libvips-tools python3)", tool)
			if os.Getenv("CI") != "" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// machineEnv is the environment of a controller a test starts: the
// machine's registry of controllers and its state (the learned history)
// in directories of the test's own, so that the tests of other packages
// running at the same time, and a controller the user runs, are other
// machines to it (one controller per machine is the rule).
func machineEnv(t *testing.T) []string {
	t.Helper()
	base := t.TempDir()
	return append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(base, "state"), "LARDON3D_RUN_DIR="+filepath.Join(base, "run"))
}

func repoRoot(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// controllerBinary is $LARDON3D_CONTROLLER, the one in $LARDON3D_BIN (set
// by make test), or a fresh build.
func controllerBinary(ctx context.Context, t *testing.T, repo string) string {
	t.Helper()
	if c := os.Getenv("LARDON3D_CONTROLLER"); c != "" {
		return c
	}
	if d := os.Getenv("LARDON3D_BIN"); d != "" {
		return filepath.Join(d, "lardon3d-controller")
	}
	controller := filepath.Join(t.TempDir(), "lardon3d-controller")
	build := exec.CommandContext(ctx, "go", "build", "-o", controller, "./cmd/lardon3d-controller")
	build.Dir = repo
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build builds it
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the controller: %v\n%s", err, out)
	}
	return controller
}

// checkSummary asserts the thresholds on evaluate's line in out.
func checkSummary(t *testing.T, out []byte) {
	t.Helper()
	m := summary.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no evaluation line in:\n%s", tail(out, 4000))
	}
	t.Logf("%s", m[0])
	registered, _ := strconv.Atoi(string(m[1]))
	total, _ := strconv.Atoi(string(m[2]))
	points, _ := strconv.Atoi(string(m[3]))
	meanErr, _ := strconv.ParseFloat(string(m[4]), 64)
	if total != 24 || registered*10 < total*9 {
		t.Errorf("registered %d of %d views, want 24 views and at least 90%% registered", registered, total)
	}
	if meanErr >= 5 {
		t.Errorf("mean camera-centre error %.2f%% of the radius, want < 5%%", meanErr)
	}
	if points < 500 {
		t.Errorf("%d 3D points, want at least 500", points)
	}
}

func TestReconstructionThroughController(t *testing.T) {
	requireColmap(t, "sqlite3")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	repo := repoRoot(t)
	work := t.TempDir()
	args := []string{filepath.Join(repo, "examples/colmap/demo.sh"), "--work", work, "--views", "24", "--width", "320", "--height", "240", "--seed", "1"}
	env := machineEnv(t)
	if os.Getenv("LARDON3D_COLMAP_DIRECT") == "1" {
		args = append(args, "--direct")
	} else {
		env = append(env, "CONTROLLER="+controllerBinary(ctx, t, repo), "CONTROLLER_FLAGS="+loadFlags())
	}
	cmd := exec.CommandContext(ctx, "sh", args...)
	cmd.Dir = repo
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo.sh: %v; its output ends with:\n%s", err, tail(out.Bytes(), 4000))
	}
	t.Logf("demo.sh took %s", time.Since(began).Round(time.Second))
	checkSummary(t, out.Bytes())
	if n := sqliteCount(ctx, t, filepath.Join(work, "project/colmap.db"), "SELECT count(*) FROM images"); n != 24 {
		t.Errorf("the database holds %d images, want 24", n)
	}
}

func TestCrashResume(t *testing.T) {
	requireColmap(t)
	if os.Getenv("LARDON3D_COLMAP_DIRECT") == "1" {
		t.Skip("crash-resume needs the controller")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	repo := repoRoot(t)
	controller := controllerBinary(ctx, t, repo)
	work := t.TempDir()
	bin, project, spool := filepath.Join(work, "bin"), filepath.Join(work, "project"), filepath.Join(work, "spool")
	mustRun(ctx, t, repo, "go", "build", "-o", bin+"/", "./examples/colmap/genviews", "./examples/colmap/evaluate")
	mustRun(ctx, t, repo, filepath.Join(bin, "genviews"), "--n", "24", "--out", project, "--seed", "4")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	manifests, _ := filepath.Glob(filepath.Join(repo, "examples/colmap/tasks/*.yaml"))
	for _, m := range manifests {
		data, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		// Batches of 8: three of them, so that one is surely in flight
		// after the first commits.
		data = regexp.MustCompile(`batch: \{min: 1, max: 12\}`).ReplaceAll(data, []byte("batch: {min: 1, max: 8}"))
		if err := os.WriteFile(filepath.Join(spool, filepath.Base(m)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runArgs := append([]string{"run", "--spool", spool, "--exit-when-done"}, regexp.MustCompile(`\s+`).Split(loadFlags(), -1)...)
	var log1 bytes.Buffer
	env := machineEnv(t)
	first := exec.CommandContext(ctx, controller, runArgs...)
	first.Env = env
	first.Stdout, first.Stderr = &log1, &log1
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait (polling the manifest the controller rewrites) for a committed
	// extraction batch and a later one in flight.
	featuresFile := filepath.Join(spool, "10-features.yaml")
	var inFlight *v1alpha1.ProcessGroupRef
	for inFlight == nil {
		select {
		case <-ctx.Done():
			t.Fatalf("no second extraction batch in flight; controller output:\n%s", tail(log1.Bytes(), 4000))
		case <-time.After(50 * time.Millisecond):
		}
		task := readTask(t, featuresFile)
		if task.Status.Phase == v1alpha1.PhaseDone || task.Status.Phase == v1alpha1.PhaseFailed {
			t.Fatalf("features ended %s before the controller could be killed mid-batch", task.Status.Phase)
		}
		if task.Status.Progress.BatchesDone >= 1 && task.Status.ProcessGroup != nil {
			inFlight = task.Status.ProcessGroup
		}
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	t.Logf("killed the controller with extraction batch group %d in flight", inFlight.PGID)

	second := exec.CommandContext(ctx, controller, runArgs...)
	second.Env = env
	out, err := second.CombinedOutput()
	if err != nil {
		t.Fatalf("restarted controller: %v\n%s", err, tail(out, 4000))
	}
	if err := syscall.Kill(-inFlight.PGID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d of the killed controller's batch still exists (kill 0: %v)", inFlight.PGID, err)
	}
	task := readTask(t, featuresFile)
	if p := task.Status.Progress; task.Status.Phase != v1alpha1.PhaseDone || p.ItemsDone != 24 {
		t.Errorf("features after resume: phase %s, %d/%d items, want Done 24/24", task.Status.Phase, p.ItemsDone, p.ItemsTotal)
	}
	eval := exec.CommandContext(ctx, filepath.Join(bin, "evaluate"), "--model", filepath.Join(project, "aligned-txt"),
		"--gt", filepath.Join(project, "gt.txt"), "--scene", filepath.Join(project, "scene.json"))
	res, err := eval.CombinedOutput()
	if err != nil {
		t.Errorf("evaluate: %v", err)
	}
	checkSummary(t, res)
}

func mustRun(ctx context.Context, t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func readTask(t *testing.T, path string) v1alpha1.Task {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var task v1alpha1.Task
	if err := yaml.Unmarshal(data, &task); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return task
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
