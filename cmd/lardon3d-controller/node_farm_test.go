package main

import (
	"bufio"
	"context"
	"fmt"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

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
		"--cgroups", "off", "--executor", "process", "--log-format", "json", "--log-level", "debug",
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
	f.createTaskYAML(doc)
}

// createTaskYAML creates the Task doc describes.
func (f *farm) createTaskYAML(doc string) {
	f.t.Helper()
	var task kubeapi.Task
	if err := yaml.UnmarshalStrict([]byte(doc), &task); err != nil {
		f.t.Fatalf("%v\n%s", err, doc)
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
