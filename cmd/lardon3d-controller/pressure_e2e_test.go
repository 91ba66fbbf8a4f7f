package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// pressureBatch holds 700 MiB, says so, and ends once the gate is gone.
const pressureBatch = `
import os, time
d = os.environ["GATE_DIR"]
buf = bytearray(700 << 20)
for i in range(0, len(buf), 4096):
    buf[i] = 1
open("%s/held-%s-%d" % (d, os.environ["LARDON3D_BATCH_INDEX"], os.getpid()), "w").close()
deadline = time.time() + 120
while os.path.exists(d + "/gate") and time.time() < deadline:
    time.sleep(0.05)
`

// userProgram is the person at the machine's program: it grows by
// argv[2] MiB every 0.5 s to 1.5 GiB, says so, and exits 0 once told to.
const userProgram = `
import os, sys, time
d, step = sys.argv[1], int(sys.argv[2])
chunks = []
while len(chunks) * step < 1536:
    b = bytearray(step << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    chunks.append(b)
    time.sleep(0.5)
open(d + "/user-full", "w").close()
while not os.path.exists(d + "/user-stop"):
    time.sleep(0.05)
`

// memoryBox makes a v1 memory cgroup of limit bytes under the test's own
// (the machine made small), removed at the end with whatever runs in it.
func memoryBox(t *testing.T, limit int64) string {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	box := filepath.Join(memoryCgroupDir(t, string(self)), fmt.Sprintf("lardon3d-box-%d", os.Getpid()))
	if err := os.Mkdir(box, 0o755); err != nil {
		t.Fatalf("a memory cgroup to make the machine small (cgroup v1, root): %v", err)
	}
	if err := os.WriteFile(filepath.Join(box, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeBox(t, box) })
	return box
}

// removeBox kills what runs in the box's cgroups, deepest first, and
// removes them.
func removeBox(t *testing.T, dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			pids := strings.Fields(string(b))
			if len(pids) == 0 || time.Now().After(deadline) {
				break
			}
			for _, p := range pids {
				if pid, err := strconv.Atoi(p); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := os.Remove(d); err != nil {
			t.Errorf("remove the box's cgroup %s: %v", d, err)
		}
	}
}

// inBox runs argv with its first process in the box.
func inBox(box string, argv ...string) *exec.Cmd {
	cmd := exec.Command("sh", append([]string{"-c", `echo $$ > "$BOX/cgroup.procs" && exec "$@"`, "sh"}, argv...)...)
	cmd.Env = append(os.Environ(), "BOX="+box)
	return cmd
}

func boxOOMKills(t *testing.T, box string) int {
	b, err := os.ReadFile(filepath.Join(box, "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Fatalf("no oom_kill in %s/memory.oom_control:\n%s", box, b)
	return 0
}

// The person at the machine comes first (issue 57): on a machine made
// small (a 2 GiB memory cgroup holding the controller, its batches and
// the user's program), a batch holding 700 MiB under a 1Gi contract and a
// user's program growing 256 MiB every 0.5 s to 1.5 GiB cannot both fit.
// The controller evicts the batch before the kernel acts: the user's
// program survives and ends 0, the box counts no OOM kill, the task is
// Pending Evicted (naming the program), runs the batch again once the
// program has exited, and ends Done with every item, no retry spent
// (retries: 0), every batch under the same contract. The same with a
// program that grows more slowly than the batch did (64 MiB every 0.5 s).
func TestBatchYieldsToTheUsersProgram(t *testing.T) {
	for _, step := range []int{256, 64} {
		t.Run(fmt.Sprintf("%dMiB-per-half-second", step), func(t *testing.T) { batchYields(t, step) })
	}
}

func batchYields(t *testing.T, stepMiB int) {
	needCgroups(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 allocates the memory the way users' programs do: %v", err)
	}
	box := memoryBox(t, 2<<30)
	spool := newSpool(t)
	gate := t.TempDir()
	if err := os.WriteFile(filepath.Join(gate, "gate"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	path := writeManifest(t, spool, "recon.yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: recon}
spec:
  command: [python3, -c, %q]
  env: [{name: GATE_DIR, value: %q}]
  items: {count: 2}
  resources: {fixed: {memory: 1Gi}, batch: {min: 1, max: 1}}
  retries: 0
`, pressureBatch, gate))

	bin := binaries(t)
	args := []string{"run", "--spool", spool, "--log-format", "json", "--kill-grace", "2s", "--load-threshold", "-1",
		"--cgroups", "required", "--exit-when-done", "--memory-pressure-soft", "768Mi", "--memory-pressure-hard", "512Mi"}
	ctl := inBox(box, append([]string{filepath.Join(bin, "lardon3d-controller")}, args...)...)
	ctl.Env = isolated(append(ctl.Env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH")), spool)
	out := &syncBuffer{}
	ctl.Stdout, ctl.Stderr = out, out
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	ctlDone := make(chan struct{})
	go func() { _ = ctl.Wait(); close(ctlDone) }()
	t.Cleanup(func() {
		_ = ctl.Process.Kill()
		<-ctlDone
		if t.Failed() {
			t.Logf("controller output:\n%s", tail(out.String(), 8000))
		}
	})
	held := func(index int) int {
		m, _ := filepath.Glob(filepath.Join(gate, fmt.Sprintf("held-%d-*", index)))
		return len(m)
	}
	eventually(t, 60*time.Second, "batch 0 holding its memory", func() bool { return held(0) == 1 })

	user := inBox(box, "python3", "-c", userProgram, gate, strconv.Itoa(stepMiB))
	user.Stdout, user.Stderr = os.Stderr, os.Stderr
	if err := user.Start(); err != nil {
		t.Fatal(err)
	}
	userDone := make(chan error, 1)
	go func() { userDone <- user.Wait() }()
	t.Cleanup(func() { _ = user.Process.Kill() })

	var evicted *v1alpha1.Task
	eventually(t, 60*time.Second, "the batch evicted, the task Pending", func() bool {
		tk := readTask(t, path)
		c := meta.FindStatusCondition(tk.Status.Conditions, v1alpha1.ConditionEvicted)
		if c != nil && tk.Status.Phase == v1alpha1.PhasePending {
			evicted = tk
			return true
		}
		return false
	})
	msg := meta.FindStatusCondition(evicted.Status.Conditions, v1alpha1.ConditionEvicted).Message
	t.Logf("Evicted: %s", msg)
	for _, want := range []string{"batch 0 yielded to memory pressure from outside the batches", "used by other programs", "largest: python3 (pid " + strconv.Itoa(user.Process.Pid) + ")"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Evicted says %q; want it to say %q", msg, want)
		}
	}
	if c := meta.FindStatusCondition(evicted.Status.Conditions, v1alpha1.ConditionAdmitted); c == nil || c.Reason != v1alpha1.ReasonEvicted {
		t.Errorf("Admitted condition %+v, want False with reason Evicted", c)
	}
	get, code := runCLI(t, "get", "--spool", spool)
	if code != 0 || !strings.Contains(get, "Evicted") {
		t.Errorf("get (exit %d) shows no Evicted REASON:\n%s", code, get)
	}
	describe, code := runCLI(t, "describe", "recon", "--spool", spool)
	if code != 0 || !strings.Contains(describe, "Evicted") || !strings.Contains(describe, "used by other programs") {
		t.Errorf("describe (exit %d) does not show the eviction:\n%s", code, describe)
	}
	eventually(t, 60*time.Second, "the user's program at its full size", func() bool {
		_, err := os.Stat(filepath.Join(gate, "user-full"))
		return err == nil
	})
	select {
	case err := <-userDone:
		t.Fatalf("the user's program ended while it should run: %v", err)
	default:
	}
	if n := held(0); n != 1 {
		t.Errorf("batch 0 ran again %d times while the user's program held the memory", n-1)
	}
	// The program exits; the batch runs again, the gate opens.
	if err := os.WriteFile(filepath.Join(gate, "user-stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-userDone; err != nil {
		t.Errorf("the user's program: %v, want exit 0", err)
	}
	eventually(t, 90*time.Second, "batch 0 running again", func() bool { return held(0) == 2 })
	if err := os.Remove(filepath.Join(gate, "gate")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctlDone:
	case <-time.After(90 * time.Second):
		t.Fatal("the controller did not end (--exit-when-done)")
	}
	done := readTask(t, path)
	if done.Status.Phase != v1alpha1.PhaseDone || done.Status.Progress.ItemsDone != 2 {
		t.Fatalf("task %s with %d items done, want Done with 2", done.Status.Phase, done.Status.Progress.ItemsDone)
	}
	if n := boxOOMKills(t, box); n != 0 {
		t.Errorf("the kernel killed %d processes in the box: the controller did not act first", n)
	}
	var reasons []string
	for _, recs := range testHistory(t, spool) {
		for _, r := range recs {
			if r.Task != "recon" {
				continue
			}
			reasons = append(reasons, r.Reason)
			if r.KilledForMemory || r.LimitBytes != 1<<30 {
				t.Errorf("batch %d: killed for memory %v, contract %d; want no kill and the same 1Gi contract", r.Batch, r.KilledForMemory, r.LimitBytes)
			}
		}
	}
	if strings.Join(reasons, ",") != "Evicted,," {
		t.Errorf("batch reasons %q, want the eviction then two successes", reasons)
	}
	table, code := runCLI(t, "batches", "--spool", spool)
	t.Logf("batches:\n%s", table)
	if code != 0 || !strings.Contains(table, "Evicted") {
		t.Errorf("batches (exit %d) does not show the eviction:\n%s", code, table)
	}
}
