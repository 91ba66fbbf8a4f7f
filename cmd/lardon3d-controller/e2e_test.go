package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	bin := binaries(t)
	// The test suite itself loads the machine (packages run in parallel):
	// load-average deferral is the governor's business, tested there.
	full := append([]string{"run", "--spool", spool, "--log-format", "json", "--kill-grace", "2s", "--load-threshold", "-1"}, args...)
	cmd := exec.Command(filepath.Join(bin, "lardon3d-controller"), full...)
	cmd.Env = isolated(append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH")), spool)
	c := &controller{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	cmd.Stdout = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		c.code = cmd.ProcessState.ExitCode()
		_ = err
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
		// What the killed controller's batches left, as a restart would.
		if tree, err := openCgroups("auto", "", stateDirOf(spool, full), zerolog.Nop()); err == nil && tree != nil {
			_, _ = runner.KillLeftoverCgroups(tree)
			_ = tree.Remove()
		}
		if t.Failed() {
			t.Logf("controller output:\n%s", tail(c.stderr.String(), 6000))
		}
	})
	return c
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

func TestExamplePipelineRunsInDependencyOrder(t *testing.T) {
	spool := newSpool(t)
	examples, err := filepath.Glob("../../examples/tasks/*.yaml")
	if err != nil || len(examples) < 4 {
		t.Fatalf("want the example pipeline, got %v %v", examples, err)
	}
	for _, src := range examples {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		writeManifest(t, spool, filepath.Base(src), string(data))
	}
	c := startController(t, spool, "--exit-when-done")
	if code := c.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	tasks := map[string]*v1alpha1.Task{}
	for _, src := range examples {
		task := readTask(t, filepath.Join(spool, filepath.Base(src)))
		if task.Status.Phase != v1alpha1.PhaseDone {
			t.Fatalf("%s: phase %q, want Done", task.Metadata.Name, task.Status.Phase)
		}
		if task.Status.Progress.ItemsDone != task.Status.Progress.ItemsTotal || task.Status.Progress.ItemsTotal == 0 {
			t.Fatalf("%s: progress %+v", task.Metadata.Name, task.Status.Progress)
		}
		tasks[task.Metadata.Name] = task
	}
	for name, task := range tasks {
		for _, dep := range task.Spec.DependsOn {
			d := tasks[dep]
			if d == nil {
				t.Fatalf("%s depends on unknown %s", name, dep)
			}
			if task.Status.StartTime.Before(d.Status.CompletionTime) {
				t.Errorf("%s started at %s, before its dependency %s completed at %s", name, task.Status.StartTime, dep, d.Status.CompletionTime)
			}
		}
	}
	// get -o json parses and agrees with the files.
	out, code := runCLI(t, "get", "--spool", spool, "-o", "json")
	if code != 0 {
		t.Fatalf("get -o json: exit %d: %s", code, out)
	}
	var list struct {
		Items []v1alpha1.Task `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("get -o json does not parse: %v\n%s", err, out)
	}
	if len(list.Items) != len(tasks) {
		t.Fatalf("get -o json lists %d tasks, the spool has %d", len(list.Items), len(tasks))
	}
	for _, item := range list.Items {
		want := tasks[item.Metadata.Name]
		if want == nil || item.Status.Phase != want.Status.Phase || item.Status.Progress != want.Status.Progress {
			t.Errorf("get -o json disagrees with the file for %s: %+v", item.Metadata.Name, item.Status)
		}
	}
	table, _ := runCLI(t, "get", "--spool", spool)
	if !strings.Contains(table, "NAME") || strings.Count(table, "Done") != len(tasks) {
		t.Errorf("get table:\n%s", table)
	}

	// describe tells the story of a task that ran, and budgets probes the
	// machine when no controller runs.
	var sfm *v1alpha1.Task
	for _, task := range tasks {
		if len(task.Spec.DependsOn) > 0 && (sfm == nil || task.Status.QueueSeq > sfm.Status.QueueSeq) {
			sfm = task
		}
	}
	out, code = runCLI(t, "describe", "--spool", spool, sfm.Metadata.Name)
	if !regexp.MustCompile(`(?m)^Phase:\s+Done$`).MatchString(out) {
		t.Errorf("describe does not say Done:\n%s", out)
	}
	for _, want := range []string{"Depends on:", "Progress:", "Last batch:", "exit 0", "Log:", sfm.Status.LogFile, "Complete"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("describe lacks %q (exit %d):\n%s", want, code, out)
		}
	}
	if _, err := os.Stat(sfm.Status.LogFile); err != nil {
		t.Errorf("the log file in status: %v", err)
	}
	out, code = runCLI(t, "budgets", "--spool", spool)
	for _, want := range []string{"probed now", "memory", "cpu threads", "CPU gate:"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("budgets lacks %q (exit %d):\n%s", want, code, out)
		}
	}

	// A restart on a finished spool runs nothing and rewrites nothing.
	before := map[string]string{}
	for _, src := range examples {
		path := filepath.Join(spool, filepath.Base(src))
		data, _ := os.ReadFile(path)
		st, _ := os.Stat(path)
		before[path] = fmt.Sprintf("%s@%d", data, st.ModTime().UnixNano())
	}
	if code := startController(t, spool, "--exit-when-done").wait(t, time.Minute); code != 0 {
		t.Fatalf("restart on a finished spool: exit %d", code)
	}
	for path, was := range before {
		data, _ := os.ReadFile(path)
		st, _ := os.Stat(path)
		if fmt.Sprintf("%s@%d", data, st.ModTime().UnixNano()) != was {
			t.Errorf("%s was rewritten by a restart on a finished spool", path)
		}
	}
}

func TestTasksThatDoNotFitTogetherRunOneAtATimeInFIFOOrder(t *testing.T) {
	spool := newSpool(t)
	ledger := filepath.Join(t.TempDir(), "ledger")
	names := []string{"one", "two", "three"}
	// Each task needs 600Mi; the budget is 1Gi with a 100Mi margin: one at a
	// time. Each batch records when its processes really start and end.
	for _, name := range names {
		writeManifest(t, spool, name+".yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s}
spec:
  command: [sh, -c, 'echo "start $LARDON3D_TASK $(date +%%s%%N)" >> %[2]s; lardon3d-synth --fixed 64Mi --per-item 0 --cpu-per-item 100ms; echo "end $LARDON3D_TASK $(date +%%s%%N)" >> %[2]s']
  items: {count: 3}
  resources:
    fixed: {memory: 600Mi}
    batch: {min: 3, max: 3}
`, name, ledger))
	}
	c := startController(t, spool, "--exit-when-done", "--memory-capacity", "1Gi", "--memory-reserved", "100Mi")
	if code := c.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	seq := map[string]int64{}
	for _, name := range names {
		task := readTask(t, filepath.Join(spool, name+".yaml"))
		if task.Status.Phase != v1alpha1.PhaseDone {
			t.Fatalf("%s: %s", name, task.Status.Phase)
		}
		seq[name] = task.Status.QueueSeq
	}
	data, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	// The ledger must read start A, end A, start B, end B, ...: never two
	// tasks at once, and in the order of their queue sequence.
	var order []string
	running := ""
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("ledger line %q", line)
		}
		switch f[0] {
		case "start":
			if running != "" {
				t.Fatalf("%s started while %s was running:\n%s", f[1], running, data)
			}
			running = f[1]
			order = append(order, f[1])
		case "end":
			running = ""
		}
	}
	if len(order) != 3 {
		t.Fatalf("ran %v, want each task once:\n%s", order, data)
	}
	for i := 1; i < len(order); i++ {
		if seq[order[i]] < seq[order[i-1]] {
			t.Errorf("FIFO broken: ran %v, queue sequence %v", order, seq)
		}
	}
}

func TestInvalidManifestIsRejectedAndUnparseableOneIsNeverRewritten(t *testing.T) {
	spool := newSpool(t)
	invalid := writeManifest(t, spool, "invalid.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [true]
  items: {count: 2}
  resources:
    batch: {min: 1, max: 0}
    perltem: {memory: 1Mi}
`)
	broken := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec: [unclosed\n  # a comment the user wants kept\n"
	brokenPath := writeManifest(t, spool, "broken.yaml", broken)
	good := writeManifest(t, spool, "good.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n")
	c := startController(t, spool, "--exit-when-done")
	if code := c.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit code %d, want 1 (not every task Done)", code)
	}
	task := readTask(t, invalid)
	if task.Status.Phase != v1alpha1.PhaseRejected {
		t.Fatalf("invalid manifest: phase %q, want Rejected", task.Status.Phase)
	}
	msg := ""
	for _, cond := range task.Status.Conditions {
		msg += cond.Reason + ": " + cond.Message + "\n"
	}
	for _, want := range []string{"InvalidSpec", "spec.resources.perltem", "spec.resources.batch.max"} {
		if !strings.Contains(msg, want) {
			t.Errorf("conditions do not mention %q:\n%s", want, msg)
		}
	}
	data, err := os.ReadFile(brokenPath)
	if err != nil || string(data) != broken {
		t.Fatalf("the unparseable manifest was rewritten:\n%q", data)
	}
	if phaseOf(t, good) != v1alpha1.PhaseDone {
		t.Errorf("good task: %s", phaseOf(t, good))
	}
	out, _ := runCLI(t, "get", "--spool", spool)
	if !strings.Contains(out, "broken") || !strings.Contains(out, "Invalid") {
		t.Errorf("get does not show the broken manifest:\n%s", out)
	}
	out, code := runCLI(t, "validate", invalid, good)
	if code == 0 || !strings.Contains(out, "spec.resources.batch.max") {
		t.Errorf("validate: exit %d\n%s", code, out)
	}
}

// procState returns the state letter of /proc/PID/stat, or 0 when gone.
func procState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}

// groupMembers lists the live processes of process group pgid.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && procState(pid) != 'Z' {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestPauseResumeAndDeleteThroughTheFiles(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "long.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, "sleep 60 & wait"]
  items: {count: 1}
`)
	startController(t, spool)
	var pgid int
	eventually(t, 20*time.Second, "the task to run with a recorded process group", func() bool {
		task := readTask(t, path)
		if task.Status.Phase == v1alpha1.PhaseRunning && task.Status.ProcessGroup != nil {
			pgid = task.Status.ProcessGroup.PGID
			return len(groupMembers(pgid)) >= 2
		}
		return false
	})
	if out, code := runCLI(t, "pause", "--spool", spool, "long"); code != 0 {
		t.Fatalf("pause: %s", out)
	}
	eventually(t, 20*time.Second, "every process of the group stopped (T) or frozen in its cgroup (D), and phase Paused", func() bool {
		for _, pid := range groupMembers(pgid) {
			if st := procState(pid); st != 'T' && st != 'D' {
				return false
			}
		}
		return phaseOf(t, path) == v1alpha1.PhasePaused
	})
	if task := readTask(t, path); task.Status.Reservation == nil {
		t.Errorf("a paused task keeps its reservation; status has none")
	}
	if out, code := runCLI(t, "resume", "--spool", spool, "long"); code != 0 {
		t.Fatalf("resume: %s", out)
	}
	eventually(t, 20*time.Second, "the group to run again", func() bool {
		members := groupMembers(pgid)
		for _, pid := range members {
			if st := procState(pid); st == 'T' || st == 'D' {
				return false
			}
		}
		return len(members) >= 2 && phaseOf(t, path) == v1alpha1.PhaseRunning
	})
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "no process of the deleted task's group left", func() bool {
		return len(groupMembers(pgid)) == 0
	})
}

// crashRun runs three tasks of 24 items (batches of at most 3) on a fresh
// spool, kills the controller with SIGKILL after each of kills, restarts it,
// lets the last run finish, and returns how many times each item completed
// ("task index" → count). Each batch starts a long-lived background process
// under a marker name (a leftover if the controller dies mid-batch) and
// records its items in a ledger only when it completes.
func crashRun(t *testing.T, kills []time.Duration) map[string]int {
	t.Helper()
	spool := newSpool(t)
	tmp := t.TempDir()
	ledger := filepath.Join(tmp, "ledger")
	marker := filepath.Join(tmp, "lardon3d-e2e-crash-marker")
	sleepBin, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sleepBin, marker); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		writeManifest(t, spool, name+".yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, '"$0" 30 & sleep 0.2; sed "s/^/$LARDON3D_TASK /" "$LARDON3D_ITEMS_FILE" >> %s; kill $!', %s]
  items: {count: 24}
  resources:
    batch: {min: 1, max: 3}
`, ledger, marker))
	}
	for _, after := range kills {
		c := startController(t, spool)
		time.Sleep(after) // let it run for a while: the point is to kill it mid-way
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.done
	}
	c := startController(t, spool, "--exit-when-done")
	if code := c.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("final run: exit code %d", code)
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		if p := phaseOf(t, filepath.Join(spool, name+".yaml")); p != v1alpha1.PhaseDone {
			t.Errorf("%s: phase %s", name, p)
		}
	}
	// No leftover process: nothing carries the marker any more.
	leftovers := func() []string {
		var found []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && bytes.HasPrefix(cmdline, []byte(marker+"\x00")) {
				stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
				found = append(found, string(stat))
			}
		}
		return found
	}
	deadline := time.Now().Add(5 * time.Second)
	for left := leftovers(); len(left) > 0; left = leftovers() {
		if time.Now().After(deadline) {
			t.Fatalf("leftover batch processes:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	data, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		counts[line]++
	}
	for _, name := range []string{"alpha", "beta", "gamma"} {
		for i := 0; i < 24; i++ {
			if n := counts[fmt.Sprintf("%s %d", name, i)]; n < 1 {
				t.Errorf("%s item %d never ran", name, i)
			}
		}
	}
	return counts
}

// TestCrashResume: after one kill -9 at an arbitrary moment and a restart,
// everything ends Done, every item ran once or twice (only the batch in
// flight runs again), and no process of the old controller's batches is
// left.
func TestCrashResume(t *testing.T) {
	for item, n := range crashRun(t, []time.Duration{700 * time.Millisecond}) {
		if n > 2 {
			t.Errorf("%s ran %d times, want 1 or 2", item, n)
		}
	}
}

// TestRepeatedCrashes: four kills at several points. Each crash may re-run
// the batch in flight of each running task (two run at once on two CPUs,
// at most 3 items a batch), never more: the re-runs stay within that bound.
func TestRepeatedCrashes(t *testing.T) {
	kills := []time.Duration{400 * time.Millisecond, 900 * time.Millisecond, 250 * time.Millisecond, 1300 * time.Millisecond}
	extra := 0
	for _, n := range crashRun(t, kills) {
		extra += n - 1
	}
	if bound := len(kills) * 2 * 3; extra > bound {
		t.Errorf("%d re-runs of items over %d crashes, want at most %d (one batch of 3 per running task per crash)", extra, len(kills), bound)
	}
}
