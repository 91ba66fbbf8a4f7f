package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

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
