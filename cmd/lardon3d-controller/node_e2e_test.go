package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/agent"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

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

// TestNodeServesProbes: with --metrics-addr the agent serves what the
// DaemonSet's probes and Prometheus read: /healthz, /readyz once its
// Tasks are listed, and /metrics with its governor's budgets and its
// tasks by phase.
func TestNodeServesProbes(t *testing.T) {
	f := newFarm(t)
	a := f.start("node-a", "--memory-capacity", "64Mi", "--metrics-addr", "127.0.0.1:0")
	var addr string
	eventually(t, 30*time.Second, "the agent's metrics address in its log", func() bool {
		data, _ := os.ReadFile(a.log)
		addr = loggedAddr(string(data), "serving metrics")
		return addr != ""
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	eventually(t, 30*time.Second, "/readyz ready", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	f.createTask("probed", 2, 2, "--cpu-per-item 1ms", "")
	f.waitFor("probed Done", time.Minute, allDone)
	eventually(t, 30*time.Second, "the Done task in /metrics", func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, `lardon3d_tasks{phase="Done"} 1`) && strings.Contains(body, `lardon3d_budget_capacity{resource="memory"}`)
	})
	f.assertLogsClean()
}
