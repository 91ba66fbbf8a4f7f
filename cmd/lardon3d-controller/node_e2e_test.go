package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/agent"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// The node agent's end-to-end tests: agents as separate processes (the
// real binary) against one real kube-apiserver (kubetest). Each batch is a
// shell wrapper around lardon3d-synth that appends, to one record file,
// "start NODE TASK BATCHSTART NANOS" before and "end ..." after.

const nodeNS = "farm"

// farm is a control plane, its namespaces, and the agents started on it.
type farm struct {
	t      testing.TB
	env    *kubetest.Env
	ctx    context.Context
	dir    string
	bin    string
	record string
	agents map[string]*nodeAgent
	// kubeconfig is what agents are given (the administrator's unless
	// asServiceAccount changed it).
	kubeconfig string
}

type nodeAgent struct {
	name  string
	args  []string
	cmd   *exec.Cmd
	log   string
	state string
	done  chan struct{}
}

func newFarm(t testing.TB) *farm {
	t.Helper()
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	for _, ns := range []string{"lardon3d", nodeNS} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	return &farm{t: t, env: env, ctx: ctx, dir: dir, bin: binaries(t), record: filepath.Join(dir, "record"), agents: map[string]*nodeAgent{}, kubeconfig: env.Kubeconfig}
}

// asServiceAccount applies deploy/rbac.yaml and makes the agents started
// afterwards act as its ServiceAccount (a kubeconfig impersonating it), so
// that they have exactly the rights a DaemonSet's pods have.
func (f *farm) asServiceAccount() {
	f.t.Helper()
	data, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(f.t), "deploy", "rbac.yaml"))
	if err != nil {
		f.t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			f.t.Fatal(err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := f.env.Client.Apply(f.ctx, ctrlclient.ApplyConfigurationFromUnstructured(u), ctrlclient.FieldOwner("kubectl")); err != nil {
			f.t.Fatalf("applying rbac.yaml %s: %v", u.GetName(), err)
		}
	}
	cfg, err := clientcmd.LoadFromFile(f.env.Kubeconfig)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = "system:serviceaccount:lardon3d:lardon3d-node"
	}
	f.kubeconfig = filepath.Join(f.dir, "kubeconfig-node")
	if err := clientcmd.WriteToFile(*cfg, f.kubeconfig); err != nil {
		f.t.Fatal(err)
	}
}

// start starts (or restarts, on the same state directory) the agent name.
func (f *farm) start(name string, extra ...string) *nodeAgent {
	f.t.Helper()
	state := filepath.Join(f.dir, "state-"+name)
	logPath := filepath.Join(f.dir, name+".log")
	args := append([]string{"node", "--kubeconfig", f.kubeconfig, "--node-name", name,
		"--state-dir", state, "--data-dir", f.dir, "--lease-duration", "2s", "--kill-grace", "1s",
		"--cgroups", "off", "--log-format", "json", "--log-level", "debug",
		"--memory-reserved", "-1", "--load-threshold", "-1", "--io-pressure-threshold", "-1"}, extra...)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(f.bin, "lardon3d-controller"), args...)
	cmd.Env = append(os.Environ(), "NODE="+name, "PATH="+f.bin+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	a := &nodeAgent{name: name, args: args, cmd: cmd, log: logPath, state: state, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(a.done) }()
	f.agents[name] = a
	f.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-a.done
		}
	})
	return a
}

// createTask creates a task of items items in batches of at most
// batchMax, each batch running lardon3d-synth with synth's flags; extra is
// appended to the spec (indented by two spaces).
func (f *farm) createTask(name string, items, batchMax int, synth string, extra string) {
	f.t.Helper()
	f.createTaskNeeding("24Mi", name, items, batchMax, synth, extra)
}

// createTaskNeeding is createTask with a declared fixed memory cost.
func (f *farm) createTaskNeeding(fixed, name string, items, batchMax int, synth string, extra string) {
	f.t.Helper()
	script := fmt.Sprintf(`echo "start $NODE $LARDON3D_TASK $LARDON3D_BATCH_START `+"`date +%%s%%N`"+`" >> %[1]s && lardon3d-synth --fixed 16Mi --per-item 1Mi %[2]s && echo "end $NODE $LARDON3D_TASK $LARDON3D_BATCH_START `+"`date +%%s%%N`"+`" >> %[1]s`, f.record, synth)
	doc := fmt.Sprintf(`
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s, namespace: %s}
spec:
  command: [sh, -c, %q]
  items: {count: %d}
  resources:
    fixed: {memory: %s}
    perItem: {memory: 2Mi}
    batch: {min: 1, max: %d}
  retries: 0
%s`, name, nodeNS, script, items, fixed, batchMax, extra)
	var task kubeapi.Task
	if err := yaml.UnmarshalStrict([]byte(doc), &task); err != nil {
		f.t.Fatalf("task %s: %v\n%s", name, err, doc)
	}
	if err := f.env.Client.Create(f.ctx, &task); err != nil {
		f.t.Fatal(err)
	}
}

func (f *farm) tasks() []kubeapi.Task {
	f.t.Helper()
	var l kubeapi.TaskList
	if err := f.env.Client.List(f.ctx, &l, ctrlclient.InNamespace(nodeNS)); err != nil {
		f.t.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items
}

// waitFor polls the tasks until cond holds.
func (f *farm) waitFor(what string, timeout time.Duration, cond func([]kubeapi.Task) bool) []kubeapi.Task {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ts := f.tasks()
		if cond(ts) {
			return ts
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, t := range ts {
				node := ""
				if t.Status.Claim != nil {
					node = fmt.Sprintf("%s#%d", t.Status.Claim.Node, t.Status.Claim.Seq)
				}
				fmt.Fprintf(&b, "\n  %s %s %d/%d %s", t.Name, t.Status.Phase, t.Status.Progress.ItemsDone, t.Status.Progress.ItemsTotal, node)
				for _, c := range t.Status.Conditions {
					if c.Status == metav1.ConditionFalse {
						fmt.Fprintf(&b, " [%s %s: %s]", c.Type, c.Reason, c.Message)
					}
				}
			}
			f.dumpLogs()
			f.t.Fatalf("timed out waiting for %s:%s", what, b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (f *farm) dumpLogs() {
	for name, a := range f.agents {
		data, _ := os.ReadFile(a.log)
		lines := strings.Split(string(data), "\n")
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		f.t.Logf("agent %s log (tail):\n%s", name, strings.Join(lines, "\n"))
	}
}

// assertLogsClean: no agent logged an error or a refused phase transition.
func (f *farm) assertLogsClean() {
	f.t.Helper()
	for name, a := range f.agents {
		data, err := os.ReadFile(a.log)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, `"level":"error"`) || strings.Contains(line, "BUG") {
				f.t.Errorf("agent %s: %s", name, line)
			}
		}
	}
}

func allDone(ts []kubeapi.Task) bool {
	for _, t := range ts {
		if t.Status.Phase != v1alpha1.PhaseDone {
			return false
		}
	}
	return len(ts) > 0
}

// run is one batch as the record file tells it.
type run struct {
	node, task string
	start      int64 // batch start item
	from, to   int64 // nanoseconds; to == 0: no end recorded (killed)
}

func (f *farm) runs() []run {
	f.t.Helper()
	fh, err := os.Open(f.record)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	open := map[string]int{}
	var out []run
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 {
			f.t.Fatalf("record line %q", sc.Text())
		}
		start, err1 := strconv.ParseInt(fs[3], 10, 64)
		at, err2 := strconv.ParseInt(fs[4], 10, 64)
		if err1 != nil || err2 != nil {
			f.t.Fatalf("record line %q", sc.Text())
		}
		key := fs[1] + " " + fs[2] + " " + fs[3]
		switch fs[0] {
		case "start":
			open[key] = len(out)
			out = append(out, run{node: fs[1], task: fs[2], start: start, from: at})
		case "end":
			i, ok := open[key]
			if !ok {
				f.t.Fatalf("end without start: %q", sc.Text())
			}
			out[i].to = at
			delete(open, key)
		}
	}
	return out
}

// assertNoOverlap: no task ever ran on two nodes at once. A run with no
// end counts as running until its node was killed (killed, in Unix
// nanoseconds), else until the end of the test.
func assertNoOverlap(t *testing.T, runs []run, killed map[string]int64) {
	t.Helper()
	end := func(r run) int64 {
		if r.to != 0 {
			return r.to
		}
		if k, ok := killed[r.node]; ok {
			return k
		}
		return 1<<63 - 1
	}
	byTask := map[string][]run{}
	for _, r := range runs {
		byTask[r.task] = append(byTask[r.task], r)
	}
	for task, rs := range byTask {
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				a, b := rs[i], rs[j]
				if a.node != b.node && a.from < end(b) && b.from < end(a) {
					t.Errorf("task %s ran on %s [%d, %d] and on %s [%d, %d] at once", task, a.node, a.from, a.to, b.node, b.from, b.to)
				}
			}
		}
	}
}

// TestNodeAgentsSpreadTasks: three agents, each with a 64Mi memory
// capacity (two batches of these tasks at once), run 60 tasks to Done;
// every node runs some, no task runs on two nodes at once, every batch ran
// exactly once, and each task's status names one node under claim 1.
func TestNodeAgentsSpreadTasks(t *testing.T) {
	f := newFarm(t)
	nodes := []string{"node-a", "node-b", "node-c"}
	for _, n := range nodes {
		f.start(n, "--memory-capacity", "64Mi")
	}
	const n = 60
	f.createTaskNeeding("1Gi", "huge", 1, 1, "", "")
	for i := range n {
		f.createTask(fmt.Sprintf("t%02d", i), 4, 2, "--cpu-per-item 2ms --hold 50ms", "")
	}
	ts := f.waitFor("60 tasks Done", 3*time.Minute, func(ts []kubeapi.Task) bool { return allDone(ts[1:]) })
	// A task too big for every node says so, with every node's capacity.
	ts = f.waitFor("huge reported as fitting no node", 30*time.Second, func(ts []kubeapi.Task) bool {
		c := meta.FindStatusCondition(ts[0].Status.Conditions, v1alpha1.ConditionAdmitted)
		return c != nil && c.Reason == agent.ReasonNoNodeFits
	})
	if ts[0].Name != "huge" || ts[0].Status.Claim != nil || ts[0].Status.Phase != v1alpha1.PhasePending {
		t.Errorf("huge: claim %+v, phase %s; want unclaimed and Pending", ts[0].Status.Claim, ts[0].Status.Phase)
	}
	msg := meta.FindStatusCondition(ts[0].Status.Conditions, v1alpha1.ConditionAdmitted).Message
	t.Logf("huge: %s", msg)
	if want := "node-a 64.0MiB, node-b 64.0MiB, node-c 64.0MiB"; !strings.Contains(msg, want) || !strings.Contains(msg, "needs 1.0GiB") {
		t.Errorf("huge's message %q does not name every node's capacity (%s) and the need (1.0GiB)", msg, want)
	}
	ts = ts[1:]
	perNode := map[string]int{}
	for _, task := range ts {
		if task.Status.Claim == nil || task.Status.Claim.Seq != 1 {
			t.Errorf("%s: claim %+v, want one claim", task.Name, task.Status.Claim)
			continue
		}
		perNode[task.Status.Claim.Node]++
		if p := task.Status.Progress; p.ItemsDone != 4 || p.ItemsTotal != 4 || p.BatchesDone != 2 {
			t.Errorf("%s: progress %+v, want 4/4 in 2 batches", task.Name, p)
		}
	}
	t.Logf("tasks per node: %v", perNode)
	for _, node := range nodes {
		if perNode[node] == 0 {
			t.Errorf("node %s ran no task: %v", node, perNode)
		}
	}
	runs := f.runs()
	assertNoOverlap(t, runs, nil)
	f.assertLogsClean()
	count := map[string]int{}
	for _, r := range runs {
		if r.to == 0 {
			t.Errorf("batch %s@%d on %s has no end", r.task, r.start, r.node)
		}
		count[fmt.Sprintf("%s@%d", r.task, r.start)]++
	}
	if len(count) != 2*n {
		t.Errorf("%d distinct batches ran, want %d", len(count), 2*n)
	}
	for k, c := range count {
		if c != 1 {
			t.Errorf("batch %s ran %d times", k, c)
		}
	}
}

// groups are the process groups of the batches an agent has on record:
// started and not ended in STATE/run/groups.jsonl.
func (a *nodeAgent) groups(t testing.TB) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(a.state, "run", "groups.jsonl"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	live := map[int]bool{}
	var order []int
	for _, line := range strings.Split(string(data), "\n") {
		var l struct {
			Start *struct{ PGID int } `json:"start"`
			End   *struct{ PGID int } `json:"end"`
		}
		if line == "" || json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case l.Start != nil:
			live[l.Start.PGID] = true
			order = append(order, l.Start.PGID)
		case l.End != nil:
			delete(live, l.End.PGID)
		}
	}
	var out []int
	for _, pgid := range order {
		if live[pgid] {
			out = append(out, pgid)
			delete(live, pgid)
		}
	}
	return out
}

// heldBy lists the tasks node holds, not settled, with committed progress.
func heldBy(ts []kubeapi.Task, node string) map[string]kubeapi.Task {
	out := map[string]kubeapi.Task{}
	for _, t := range ts {
		if t.Status.Claim != nil && t.Status.Claim.Node == node && !v1alpha1.IsTerminal(t.Status.Phase) {
			out[t.Name] = t
		}
	}
	return out
}

// TestNodeKilledTasksTakenOver: node-a is killed (kill -9, its batches
// with it: the machine is lost) while it runs tasks with committed
// progress. Once its Lease expired (2 s) the other two take its tasks
// over (claim 2) and resume them from the committed progress: the first
// batch the new holder runs starts where the status said, no item runs
// more than twice, and no task runs on two nodes at once. node-a,
// restarted on the same state directory, takes part again only through
// fresh claims: it claims none of its former tasks and some new ones.
func TestNodeKilledTasksTakenOver(t *testing.T) {
	f := newFarm(t)
	a := f.start("node-a", "--memory-capacity", "64Mi")
	const n = 6
	for i := range n {
		f.createTask(fmt.Sprintf("k%d", i), 8, 1, "--cpu-per-item 2ms --hold 300ms", "")
	}
	// node-a alone first, so that it holds tasks when it dies.
	ts := f.waitFor("node-a running tasks with committed progress", time.Minute, func(ts []kubeapi.Task) bool {
		for _, t := range heldBy(ts, "node-a") {
			if t.Status.Progress.ItemsDone >= 2 {
				return true
			}
		}
		return false
	})
	f.start("node-b", "--memory-capacity", "64Mi")
	f.start("node-c", "--memory-capacity", "64Mi")
	time.Sleep(300 * time.Millisecond)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	for _, pgid := range a.groups(t) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	killedAt := time.Now().UnixNano()
	ts = f.tasks()
	lost := heldBy(ts, "node-a")
	if len(lost) == 0 {
		t.Fatal("node-a held no task when killed")
	}
	committed := map[string]int64{}
	for name, task := range lost {
		committed[name] = task.Status.Progress.ItemsDone
	}
	t.Logf("node-a killed holding %v (items committed)", committed)

	ts = f.waitFor("every task Done", 2*time.Minute, allDone)
	for name := range lost {
		var task kubeapi.Task
		for _, x := range ts {
			if x.Name == name {
				task = x
			}
		}
		if cl := task.Status.Claim; cl == nil || cl.Node == "node-a" || cl.Seq != 2 {
			t.Errorf("%s: claim %+v, want taken over by another node under claim 2", name, cl)
		}
	}
	runs := f.runs()
	assertNoOverlap(t, runs, map[string]int64{"node-a": killedAt})
	count := map[string]int{}
	for _, r := range runs {
		count[fmt.Sprintf("%s@%d", r.task, r.start)]++
	}
	for k, c := range count {
		if c > 2 {
			t.Errorf("item %s ran %d times, want at most twice", k, c)
		}
	}
	// The new holder resumes from the committed progress: at least what
	// was committed when node-a died (read after its death; a write it
	// sent just before may land after the read), at most the items whose
	// batch on node-a ended (nothing is skipped).
	for name, done := range committed {
		first := int64(-1)
		ended := map[int64]bool{}
		for _, r := range runs {
			if r.task != nodeNS+"."+name {
				continue
			}
			if r.node == "node-a" && r.to != 0 {
				ended[r.start] = true
			}
			if r.node != "node-a" && (first < 0 || r.start < first) {
				first = r.start
			}
		}
		if first < done || first > int64(len(ended)) {
			t.Errorf("%s: the new holder's first batch starts at item %d; want from the committed progress, between %d (committed when node-a died) and %d (ended on node-a)", name, first, done, len(ended))
		}
	}
	// Every item of every task ran to its end somewhere.
	for i := range n {
		task := fmt.Sprintf("%s.k%d", nodeNS, i)
		for item := range int64(8) {
			ok := false
			for _, r := range runs {
				ok = ok || (r.task == task && r.start == item && r.to != 0)
			}
			if !ok {
				t.Errorf("%s: item %d never ran to its end", task, item)
			}
		}
	}

	// node-a comes back on the same state directory.
	f.start("node-a", "--memory-capacity", "64Mi")
	restarted := time.Now()
	for i := range n {
		f.createTask(fmt.Sprintf("r%d", i), 4, 1, "--cpu-per-item 2ms --hold 300ms", "")
	}
	ts = f.waitFor("every task Done after the restart", 2*time.Minute, allDone)
	fresh := 0
	for _, task := range ts {
		cl := task.Status.Claim
		if cl.Node == "node-a" && cl.ClaimedAt.After(restarted.Add(-time.Second)) {
			if !strings.HasPrefix(task.Name, "r") || cl.Seq != 1 {
				t.Errorf("restarted node-a claimed %s under claim %d: only fresh claims of new tasks are expected", task.Name, cl.Seq)
			}
			fresh++
		}
	}
	if fresh == 0 {
		t.Error("restarted node-a claimed none of the new tasks")
	}
	f.assertLogsClean()
}

// TestNodeStaleAgentFenced: node-a is stopped (SIGSTOP, with its batch:
// a partition) in the middle of a CPU-bound batch of its task; its Lease
// expires and node-b takes the task over. node-a, continued with its stale
// view, finds the task held under claim 2: it kills its batch at once
// (the batch never records its end, though it had CPU work left), writes
// nothing under its old claim, and takes part again only through a fresh
// claim of a new task.
func TestNodeStaleAgentFenced(t *testing.T) {
	f := newFarm(t)
	a := f.start("node-a", "--memory-capacity", "40Mi")
	f.createTask("long", 3, 1, "--cpu-per-item 4s", "")
	f.waitFor("node-a running long", time.Minute, func(ts []kubeapi.Task) bool {
		return len(heldBy(ts, "node-a")) == 1 && ts[0].Status.Phase == v1alpha1.PhaseRunning && len(a.groups(t)) == 1
	})
	time.Sleep(500 * time.Millisecond)
	pgid := a.groups(t)[0]
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	f.start("node-b", "--memory-capacity", "40Mi")
	f.waitFor("node-b taking long over", time.Minute, func(ts []kubeapi.Task) bool {
		cl := ts[0].Status.Claim
		return cl != nil && cl.Node == "node-b" && cl.Seq == 2 && ts[0].Status.Phase == v1alpha1.PhaseRunning
	})
	// node-b is full (40Mi: one batch); a new task can only go to node-a.
	f.createTask("after", 1, 1, "--cpu-per-item 2ms", "")
	continued := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The stale batch dies at once (kill grace 1 s; about 2 s measured),
	// long before its CPU work (4 s per item) is done; the bound leaves
	// room for a loaded machine.
	deadline := time.Now().Add(8 * time.Second)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			f.dumpLogs()
			t.Fatalf("node-a's stale batch (group %d) still runs %v after node-a continued", pgid, time.Since(continued))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("node-a's stale batch gone %v after node-a continued", time.Since(continued).Round(time.Millisecond))
	ts := f.waitFor("both tasks Done", 2*time.Minute, allDone)
	for _, r := range f.runs() {
		if r.node == "node-a" && r.task == nodeNS+".long" && r.to != 0 {
			t.Errorf("node-a's stale batch of long at item %d recorded its end: it was not killed", r.start)
		}
	}
	if cl := ts[1].Status.Claim; ts[1].Name != "long" || cl.Node != "node-b" || cl.Seq != 2 {
		t.Errorf("long: claim %+v, want node-b's claim 2", cl)
	}
	if cl := ts[0].Status.Claim; ts[0].Name != "after" || cl.Node != "node-a" || cl.Seq != 1 {
		t.Errorf("after: claim %+v, want a fresh claim by node-a", cl)
	}
	data, err := os.ReadFile(a.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "fenced") {
		t.Error("node-a's log does not say it was fenced")
	}
	f.assertLogsClean()
}

// TestNodePipelineInDependencyOrder: the bundled pipeline, applied as
// `kubectl apply --server-side -f examples/tasks/` does, runs to Done on
// two agents in dependency order: no task starts before every task it
// depends on completed. The agents act as deploy/rbac.yaml's
// ServiceAccount: those rights are enough.
func TestNodePipelineInDependencyOrder(t *testing.T) {
	f := newFarm(t)
	f.asServiceAccount()
	files, err := filepath.Glob(filepath.Join(kubetest.RepoRoot(t), "examples", "tasks", "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("example manifests: %v %v", files, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		u.SetNamespace(nodeNS)
		if err := f.env.Client.Apply(f.ctx, ctrlclient.ApplyConfigurationFromUnstructured(u), ctrlclient.FieldOwner("kubectl")); err != nil {
			t.Fatalf("applying %s: %v", file, err)
		}
	}
	f.start("node-a", "--memory-capacity", "256Mi")
	f.start("node-b", "--memory-capacity", "256Mi")
	ts := f.waitFor("the pipeline Done", 3*time.Minute, allDone)
	if len(ts) != len(files) {
		t.Fatalf("%d tasks, want %d", len(ts), len(files))
	}
	byName := map[string]kubeapi.Task{}
	for _, task := range ts {
		byName[task.Name] = task
	}
	edges := 0
	for _, task := range ts {
		for _, dep := range task.Spec.DependsOn {
			d := byName[dep]
			edges++
			if task.Status.StartTime == nil || d.Status.CompletionTime == nil || task.Status.StartTime.Before(d.Status.CompletionTime) {
				t.Errorf("%s started at %v, before its dependency %s completed at %v", task.Name, task.Status.StartTime, dep, d.Status.CompletionTime)
			}
			if task.Status.Claim.ClaimedAt.Before(d.Status.CompletionTime) {
				t.Errorf("%s was claimed at %v, before its dependency %s completed at %v", task.Name, task.Status.Claim.ClaimedAt, dep, d.Status.CompletionTime)
			}
		}
	}
	if edges == 0 {
		t.Fatal("the pipeline has no dependsOn: nothing was checked")
	}
	f.assertLogsClean()
}

// TestNodeRestartTakesOverItsOwnClaims: the only agent is killed (kill -9,
// its batch with it) mid-task and restarted at once under the same name,
// its Lease still alive: it takes its own former claim over (claim 2) and
// finishes the task from the committed progress.
func TestNodeRestartTakesOverItsOwnClaims(t *testing.T) {
	f := newFarm(t)
	a := f.start("node-a", "--memory-capacity", "64Mi")
	f.createTask("solo", 6, 1, "--cpu-per-item 2ms --hold 300ms", "")
	ts := f.waitFor("solo with committed progress", time.Minute, func(ts []kubeapi.Task) bool {
		return ts[0].Status.Progress.ItemsDone >= 2 && ts[0].Status.Phase == v1alpha1.PhaseRunning
	})
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
	for _, pgid := range a.groups(t) {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	killedAt := time.Now().UnixNano()
	ts = f.tasks()
	done := ts[0].Status.Progress.ItemsDone
	f.start("node-a", "--memory-capacity", "64Mi")
	ts = f.waitFor("solo Done", time.Minute, allDone)
	if cl := ts[0].Status.Claim; cl.Node != "node-a" || cl.Seq != 2 {
		t.Errorf("claim %+v, want node-a's claim 2", cl)
	}
	var resumedAt int64 = -1
	ended := map[int64]bool{}
	for _, r := range f.runs() {
		if r.from > killedAt && (resumedAt < 0 || r.start < resumedAt) {
			resumedAt = r.start
		}
		if r.from < killedAt && r.to != 0 {
			ended[r.start] = true
		}
	}
	// Between what was committed when it died (read after; a write sent
	// just before may land later) and what had ended.
	if resumedAt < done || resumedAt > int64(len(ended)) {
		t.Errorf("the restarted agent's first batch starts at item %d, want from the committed progress, between %d and %d", resumedAt, done, len(ended))
	}
	f.assertLogsClean()
}
