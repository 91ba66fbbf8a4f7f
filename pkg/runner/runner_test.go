package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"golang.org/x/sys/unix"
)

// The test binary doubles as a helper process when helperEnv is set:
// "alloc" allocates and touches allocBytesEnv bytes then blocks; "controller"
// plays a controller that starts a batch, prints its group and blocks, to be
// killed by the test.
const (
	helperEnv     = "RUNNER_TEST_HELPER"
	allocBytesEnv = "RUNNER_TEST_ALLOC_BYTES"
	runDirEnv     = "RUNNER_TEST_RUN_DIR"
	commandEnv    = "RUNNER_TEST_COMMAND"
	cgroupNameEnv = "RUNNER_TEST_CGROUP"
	// userEnv, set to "nobody", runs the controller helper's batch as
	// uid 65534.
	userEnv = "RUNNER_TEST_USER"
)

var sink [][]byte

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "alloc":
		n, _ := strconv.ParseInt(os.Getenv(allocBytesEnv), 10, 64)
		for done := int64(0); done < n; done += 4 << 20 {
			c := make([]byte, 4<<20)
			for i := 0; i < len(c); i += 4096 {
				c[i] = 1
			}
			sink = append(sink, c)
		}
		fmt.Println("allocated")
		select {}
	case "controller":
		dir := os.Getenv(runDirEnv)
		command := "sleep 300 & echo started; wait"
		if c := os.Getenv(commandEnv); c != "" {
			command = c
		}
		var tree *cgroup.Tree
		if name := os.Getenv(cgroupNameEnv); name != "" {
			var err error
			if tree, err = cgroup.Open(cgroup.Options{Name: name}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
		var u *User
		if os.Getenv(userEnv) == "nobody" {
			var err error
			if u, err = LookupUser(65534, 65534); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
		b, err := Start(context.Background(), Spec{
			Task: "orphan", Command: []string{"sh", "-c", command},
			LogPath: filepath.Join(dir, "log"), RunDir: dir, Items: []string{"0"}, Cgroup: tree, User: u,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		_ = json.NewEncoder(os.Stdout).Encode(b.Group())
		select {}
	case "subreaper":
		subreaperHelper()
		os.Exit(0)
	default: // "vforkstop" runs from vfork_amd64_test.go's init
		os.Exit(3)
	}
}

func testSpec(t *testing.T, command ...string) Spec {
	t.Helper()
	dir := t.TempDir()
	return Spec{
		Task: "t", Command: command, LogPath: filepath.Join(dir, "task.log"), RunDir: filepath.Join(dir, "run"),
		Items: []string{"0"}, ItemsTotal: 1, Threads: 1,
		SampleInterval: 10 * time.Millisecond, KillGrace: 2 * time.Second,
	}
}

func start(t *testing.T, s Spec) *Batch {
	t.Helper()
	b, err := Start(context.Background(), s)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		b.Cancel()
		b.Wait()
		<-b.Done() // its cgroup handed back too, before the test's subtree is
	})
	return b
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool, context ...func() string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, c := range context {
				what += "\n" + c()
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func members(t *testing.T, pgid int) []member {
	t.Helper()
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := groupMembers(fs, pgid)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func liveMembers(t *testing.T, pgid int) []member {
	t.Helper()
	var out []member
	for _, m := range members(t, pgid) {
		if !m.gone() {
			out = append(out, m)
		}
	}
	return out
}

func readLog(t *testing.T, s Spec) string {
	t.Helper()
	b, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEnvironmentItemsAndExpansion(t *testing.T) {
	scratch := t.TempDir()
	// The sleep outlives a few samples: a batch that ends before the first
	// one reports no peak, and the assertion below wants one.
	s := testSpec(t, "sh", "-c", `env | sort; echo "ITEMS:"; cat "$LARDON3D_ITEMS_FILE"; echo "ARGS: $1 $2 $3"; pwd; sleep 0.3`,
		"sh", "$(LARDON3D_TASK)-$(LARDON3D_BATCH_INDEX)", "$$(LARDON3D_TASK)", "$(UNDEFINED_VAR)")
	s.Task, s.Items, s.BatchIndex, s.BatchStart, s.ItemsTotal = "feat", []string{"img/a.jpg", "img/b c.jpg", "img/d.jpg"}, 3, 120, 1200
	s.Threads, s.MemoryLimit, s.ScratchDir, s.WorkingDir = 4, 2362232012, scratch, scratch
	s.Env = []EnvVar{{"OUT", "$(LARDON3D_SCRATCH_DIR)/out-$(LARDON3D_BATCH_START)"}, {"OMP_PROC_BIND", "true"}}
	b := start(t, s)
	res := b.Wait()
	if res.ExitCode != 0 || res.Reason != "" {
		t.Fatalf("result %+v, log:\n%s", res, readLog(t, s))
	}
	log := readLog(t, s)
	for _, want := range []string{
		"LARDON3D_TASK=feat\n", "LARDON3D_BATCH_INDEX=3\n", "LARDON3D_BATCH_START=120\n", "LARDON3D_BATCH_SIZE=3\n",
		"LARDON3D_ITEMS_TOTAL=1200\n", "LARDON3D_ITEMS_FILE=" + b.ItemsFile() + "\n", "LARDON3D_THREADS=4\n",
		"LARDON3D_MEMORY_LIMIT=2362232012\n", "LARDON3D_SCRATCH_DIR=" + scratch + "\n", "OMP_NUM_THREADS=4\n",
		"OPENBLAS_NUM_THREADS=4\n", "MKL_NUM_THREADS=4\n", "GOMAXPROCS=4\n", "OMP_PROC_BIND=true\n",
		"OUT=" + scratch + "/out-120\n", "PATH=" + os.Getenv("PATH") + "\n",
		"ITEMS:\nimg/a.jpg\nimg/b c.jpg\nimg/d.jpg\nARGS: feat-3 $(LARDON3D_TASK) $(UNDEFINED_VAR)\n" + scratch + "\n",
		"=== batch 3 items 120..122 threads 4 memory 2.2GiB attempt 1 at ",
		"=== batch 3 ended: exit code 0",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q; log:\n%s", want, log)
		}
	}
	if !strings.HasPrefix(b.ItemsFile(), s.RunDir+"/") {
		t.Errorf("items file %s not in run dir %s", b.ItemsFile(), s.RunDir)
	}
	if _, err := os.Stat(b.ItemsFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("items file of a successful batch kept: %v", err)
	}
	if res.PeakMemoryBytes <= 0 || res.Ended.Before(res.Started) {
		t.Errorf("result %+v: want a positive peak and ordered times", res)
	}
}

func TestLogHeadersAppendAndNonZeroExit(t *testing.T) {
	s := testSpec(t, "sh", "-c", "echo out-$LARDON3D_BATCH_INDEX; echo err >&2; exit 3")
	s.Items = []string{"a", "b"}
	for i := range 2 {
		s.BatchIndex, s.BatchStart, s.Attempt = int64(i), int64(2*i), i+1
		res := start(t, s).Wait()
		if res.ExitCode != 3 || res.Reason != "" || res.Message != "exited with code 3" {
			t.Errorf("batch %d: result %+v, want exit code 3 and no reason", i, res)
		}
	}
	log := readLog(t, s)
	re := regexp.MustCompile(`(?m)^=== batch (\d) items (\d\.\.\d) threads 1 memory unlimited attempt (\d) at (\S+) ===$`)
	hs := re.FindAllStringSubmatch(log, -1)
	if len(hs) != 2 {
		t.Fatalf("want 2 headers, log:\n%s", log)
	}
	for i, h := range hs {
		if h[1] != fmt.Sprint(i) || h[2] != fmt.Sprintf("%d..%d", 2*i, 2*i+1) || h[3] != fmt.Sprint(i+1) {
			t.Errorf("header %d = %q", i, h[0])
		}
		if _, err := time.Parse(time.RFC3339, h[4]); err != nil {
			t.Errorf("header %d time: %v", i, err)
		}
	}
	if !strings.Contains(log, "out-0\nerr\n") || !strings.Contains(log, "out-1\nerr\n") {
		t.Errorf("stdout and stderr of both batches not in the log:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(s.RunDir, itemsFileName(s.Task, 1))); err != nil {
		t.Errorf("items file of a failed batch not kept: %v", err)
	}
}

func TestCommandNotFound(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ cmd, want string }{
		{"lardon3d-no-such-command", `command "lardon3d-no-such-command" not found in PATH`},
		{"./notexec", `command "./notexec" not executable`},
	} {
		s := testSpec(t, tc.cmd, "x")
		s.WorkingDir = dir
		b, err := Start(context.Background(), s)
		if b != nil || !errors.Is(err, ErrCommandNotFound) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Start(%s) = %v, %v; want ErrCommandNotFound with %q", tc.cmd, b, err, tc.want)
		}
		if log := readLog(t, s); !strings.Contains(log, "could not start: "+tc.want) {
			t.Errorf("log does not say why:\n%s", log)
		}
	}
	if _, err := Start(context.Background(), testSpec(t)); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("empty command: %v, want ErrInvalidSpec", err)
	}
}

func TestPauseStopsEveryProcessAndResumeRunsThem(t *testing.T) {
	s := testSpec(t, "sh", "-c", "sleep 300 & sleep 300 & wait")
	b := start(t, s)
	pgid := b.Group().PGID
	waitFor(t, "three processes in the group", func() bool { return len(liveMembers(t, pgid)) == 3 })
	if err := b.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	ms := liveMembers(t, pgid)
	if len(ms) != 3 {
		t.Fatalf("group has %d live processes after pause, want 3", len(ms))
	}
	for _, m := range ms {
		if m.state != "T" {
			t.Errorf("pid %d in state %s after Pause, want T", m.pid, m.state)
		}
	}
	if err := b.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitFor(t, "no stopped process after resume", func() bool {
		for _, m := range liveMembers(t, pgid) {
			if m.stopped() {
				return false
			}
		}
		return true
	})
	if n := len(liveMembers(t, pgid)); n != 3 {
		t.Errorf("%d processes after resume, want 3", n)
	}
	// Cancel a paused batch: SIGTERM must reach stopped processes.
	if err := b.Pause(); err != nil {
		t.Fatal(err)
	}
	b.Cancel()
	res := b.Wait()
	if res.Reason != ReasonCancelled {
		t.Errorf("reason %q, want %s", res.Reason, ReasonCancelled)
	}
	if err := b.Pause(); !errors.Is(err, ErrBatchEnded) {
		t.Errorf("Pause after end: %v, want ErrBatchEnded", err)
	}
}

func TestCancelLeavesNoProcessEvenIgnoringSIGTERM(t *testing.T) {
	// The shell and its grandchild ignore SIGTERM: only SIGKILL after the
	// grace period ends them.
	s := testSpec(t, "sh", "-c", `trap "" TERM; sh -c "sleep 300 & wait" & wait`)
	s.KillGrace = 200 * time.Millisecond
	b := start(t, s)
	pgid := b.Group().PGID
	waitFor(t, "the grandchild", func() bool { return len(liveMembers(t, pgid)) == 3 })
	b.Cancel()
	b.Cancel() // idempotent
	res := b.Wait()
	if res.Reason != ReasonCancelled || res.ExitCode != -1 {
		t.Errorf("result %+v, want Cancelled and exit code -1", res)
	}
	if ms := liveMembers(t, pgid); len(ms) != 0 {
		t.Errorf("processes left in the group after Wait: %+v", ms)
	}
}

func TestContextEndCancels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	b, err := Start(ctx, testSpec(t, "sleep", "300"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	res := b.Wait()
	if res.Reason != ReasonCancelled || !strings.Contains(res.Message, "context canceled") {
		t.Errorf("result %+v, want Cancelled by the context", res)
	}
}

func TestStragglersKilledWhenLeaderExits(t *testing.T) {
	s := testSpec(t, "sh", "-c", `sleep 300 & echo "child $!"`)
	b := start(t, s)
	res := b.Wait()
	if res.ExitCode != 0 || res.Reason != "" || res.Stragglers != 1 {
		t.Errorf("result %+v, want exit 0 and 1 straggler", res)
	}
	if ms := liveMembers(t, b.Group().PGID); len(ms) != 0 {
		t.Errorf("processes left in the group: %+v", ms)
	}
	if log := readLog(t, s); !strings.Contains(log, "killed 1 processes left in the group") {
		t.Errorf("log does not mention the straggler:\n%s", log)
	}
}

func TestMemoryExceededKillsTheGroup(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const limit = 48 << 20
	// The allocating helper runs as a grandchild under a shell, with a
	// sleeping sibling: the whole group must die.
	s := testSpec(t, "sh", "-c", `sleep 300 & "$0"; wait`, self)
	s.MemoryLimit = limit
	s.Env = []EnvVar{{helperEnv, "alloc"}, {allocBytesEnv, strconv.Itoa(512 << 20)}}
	b := start(t, s)
	res := b.Wait()
	if res.Reason != ReasonMemoryExceeded || res.ExitCode != -1 {
		t.Fatalf("result %+v, want MemoryExceeded and exit code -1; log:\n%s", res, readLog(t, s))
	}
	if res.PeakMemoryBytes <= limit*11/10 {
		t.Errorf("peak %d not above the limit %d + 10%%", res.PeakMemoryBytes, limit)
	}
	re := regexp.MustCompile(`^peak \d+\.\dMiB exceeded the contract 48\.0MiB by more than 10%$`)
	if !re.MatchString(res.Message) {
		t.Errorf("message %q does not match %s", res.Message, re)
	}
	if ms := liveMembers(t, b.Group().PGID); len(ms) != 0 {
		t.Errorf("processes left in the group: %+v", ms)
	}
}

func TestBatchWithinContractIsNotKilled(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Allocates 16MiB against a 1GiB contract, then the test cancels it.
	s := testSpec(t, self)
	s.MemoryLimit = 1 << 30
	s.Env = []EnvVar{{helperEnv, "alloc"}, {allocBytesEnv, strconv.Itoa(16 << 20)}}
	b := start(t, s)
	waitFor(t, "the allocation", func() bool { return strings.Contains(readLog(t, s), "allocated") })
	b.Cancel()
	res := b.Wait()
	if res.Reason != ReasonCancelled || res.PeakMemoryBytes < 16<<20 {
		t.Errorf("result %+v, want Cancelled with a peak of at least 16MiB", res)
	}
}

func TestTimeout(t *testing.T) {
	s := testSpec(t, "sleep", "300")
	s.Timeout = 100 * time.Millisecond
	res := start(t, s).Wait()
	if res.Reason != ReasonBatchTimeout || res.ExitCode != -1 || !strings.Contains(res.Message, "100ms") {
		t.Errorf("result %+v, want BatchTimeout", res)
	}
}

func TestCPUAffinity(t *testing.T) {
	s := testSpec(t, "grep", "Cpus_allowed_list", "/proc/self/status")
	s.CPUs = []int{0}
	res := start(t, s).Wait()
	if res.ExitCode != 0 {
		t.Fatalf("result %+v", res)
	}
	if log := readLog(t, s); !regexp.MustCompile(`Cpus_allowed_list:\s+0\n`).MatchString(log) {
		t.Errorf("child not bound to CPU 0:\n%s", log)
	}
	// No thread of the controller keeps the narrowed mask.
	masks := threadAffinities(t)
	for tid, mask := range masks {
		if mask != masks[os.Getpid()] {
			t.Errorf("thread %d has affinity %s, the main thread %s", tid, mask, masks[os.Getpid()])
		}
	}
}

func TestExecFailureIsCommandNotFound(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), testSpec(t, script))
	if !errors.Is(err, ErrCommandNotFound) || !strings.Contains(err.Error(), "cannot be executed") {
		t.Errorf("Start with a missing interpreter: %v, want ErrCommandNotFound", err)
	}
}

func threadAffinities(t *testing.T) map[int]string {
	t.Helper()
	out := map[int]string{}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		b, err := os.ReadFile(filepath.Join("/proc/self/task", e.Name(), "status"))
		if err != nil {
			continue
		}
		if m := regexp.MustCompile(`Cpus_allowed_list:\s+(\S+)`).FindSubmatch(b); m != nil {
			out[tid] = string(m[1])
		}
	}
	return out
}

func TestKillLeftoverAfterControllerDeath(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctl := exec.Command(self)
	ctl.Env = append(os.Environ(), helperEnv+"=controller", runDirEnv+"="+dir)
	out, err := ctl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	var pg ProcessGroup
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &pg) != nil || pg.PGID <= 1 || pg.StartTicks == 0 {
		_ = ctl.Process.Kill()
		t.Fatalf("controller said %q, %v", line, err)
	}
	t.Cleanup(func() { _ = signalGroup(pg.PGID, unix.SIGKILL) })
	waitFor(t, "the batch's grandchild", func() bool { return len(liveMembers(t, pg.PGID)) == 2 })

	// The controller crashes: the leader dies with it (parent-death
	// signal), the grandchild stays behind.
	_ = ctl.Process.Signal(syscall.SIGKILL)
	_ = ctl.Wait()
	waitFor(t, "the leader's death", func() bool {
		for _, m := range liveMembers(t, pg.PGID) {
			if m.pid == pg.PGID {
				return false
			}
		}
		return true
	})
	if n := len(liveMembers(t, pg.PGID)); n != 1 {
		t.Fatalf("%d processes left in the group, want the grandchild", n)
	}
	// A record from another boot kills nothing.
	if n, err := KillLeftover(ProcessGroup{PGID: pg.PGID, StartTicks: pg.StartTicks, BootID: "another-boot"}); n != 0 || err != nil {
		t.Errorf("KillLeftover with another boot id = %d, %v", n, err)
	}
	n, err := KillLeftover(pg)
	if n != 1 || err != nil {
		t.Errorf("KillLeftover = %d, %v; want 1, nil", n, err)
	}
	if ms := liveMembers(t, pg.PGID); len(ms) != 0 {
		t.Errorf("processes left: %+v", ms)
	}
	if n, err := KillLeftover(pg); n != 0 || err != nil {
		t.Errorf("second KillLeftover = %d, %v; want 0, nil", n, err)
	}
}

func TestKillLeftoverRefusesReusedPID(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ticks, err := StartTicks(procfs.DefaultMountPoint, cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	// The record says the group's leader started earlier: this pid is
	// another process now.
	n, err := KillLeftover(ProcessGroup{PGID: cmd.Process.Pid, StartTicks: ticks - 1})
	if n != 0 || err != nil {
		t.Errorf("KillLeftover on a reused pid = %d, %v; want 0, nil", n, err)
	}
	if ms := liveMembers(t, cmd.Process.Pid); len(ms) != 1 {
		t.Fatalf("the process with a reused pid was killed")
	}
	if n, err := KillLeftover(ProcessGroup{PGID: cmd.Process.Pid, StartTicks: ticks}); n != 1 || err != nil {
		t.Errorf("KillLeftover on the right record = %d, %v; want 1, nil", n, err)
	}
}
