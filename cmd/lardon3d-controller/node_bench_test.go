package main

import (
	"fmt"
	"slices"
	"sort"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// BenchmarkNodeAgents measures the node agents against one real
// kube-apiserver (make bench-kube; one iteration is the whole scenario,
// -benchtime 1x):
//
//   - create→Running latency with three agents: after one warm-up task,
//     100 tasks (sleep 0.3 s each) created one every 50 ms, the time from
//     each Create call to the first status a watch sees in Running (or
//     Done), p50 and p99;
//   - 1,000 trivial tasks (true) created up front, then run by 1 agent and,
//     in another namespace, by 3 agents: tasks per second from the agents'
//     start to the last Done, and the ratio.
func BenchmarkNodeAgents(b *testing.B) {
	for range b.N {
		f := newFarm(b)
		args := []string{"--memory-capacity", "2Gi", "--log-level", "info"}

		// Latency, three agents.
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			f.start(n, append(args, "--namespace", nodeNS)...)
		}
		waitLeases(b, f, 3)
		// Warm-up: on a fresh API server and fresh agents the first watch
		// events of Tasks arrive about 2 s late (measured: the informer
		// lists nothing, then sees the task 2 s after its creation); one
		// task first, so that the numbers are the steady state's.
		benchTask(b, f, nodeNS, "warmup", `["true"]`)
		f.waitFor("the warm-up task Done", time.Minute, allDone)
		wc, err := ctrlclient.NewWithWatch(f.env.Config, ctrlclient.Options{Scheme: f.env.Scheme})
		if err != nil {
			b.Fatal(err)
		}
		w, err := wc.Watch(f.ctx, &kubeapi.TaskList{}, ctrlclient.InNamespace(nodeNS))
		if err != nil {
			b.Fatal(err)
		}
		running := map[string]time.Time{}
		seen := make(chan struct{})
		go func() {
			defer close(seen)
			for ev := range w.ResultChan() {
				t, ok := ev.Object.(*kubeapi.Task)
				if !ok || ev.Type == watch.Deleted {
					continue
				}
				if p := t.Status.Phase; (p == v1alpha1.PhaseRunning || p == v1alpha1.PhaseDone) && running[t.Name].IsZero() {
					running[t.Name] = time.Now()
				}
			}
		}()
		const nLatency = 100
		created := map[string]time.Time{}
		for i := range nLatency {
			name := fmt.Sprintf("lat%03d", i)
			created[name] = time.Now()
			benchTask(b, f, nodeNS, name, `[sleep, "0.3"]`)
			time.Sleep(50 * time.Millisecond)
		}
		f.waitFor("the latency tasks Done", 2*time.Minute, allDone)
		w.Stop()
		<-seen
		var lat []time.Duration
		for name, at := range created {
			if name == "warmup" {
				continue
			}
			r, ok := running[name]
			if !ok {
				b.Fatalf("%s was never seen Running", name)
			}
			lat = append(lat, r.Sub(at))
		}
		slowest := make([]string, 0, len(created))
		for name := range created {
			slowest = append(slowest, name)
		}
		sort.Slice(slowest, func(i, j int) bool {
			return running[slowest[i]].Sub(created[slowest[i]]) > running[slowest[j]].Sub(created[slowest[j]])
		})
		for _, name := range slowest[:3] {
			b.Logf("slow: %s %v", name, running[name].Sub(created[name]))
		}
		slices.Sort(lat)
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		b.ReportMetric(float64(p50.Microseconds())/1000, "create-running-p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "create-running-p99-ms")
		b.Logf("create→Running over %d tasks, 3 agents: p50 %v, p99 %v, max %v", len(lat), p50, p99, lat[len(lat)-1])
		for _, a := range f.agents {
			stopAgent(a)
		}

		// Throughput: 1,000 trivial tasks over 1 agent, then over 3.
		const nThroughput = 1000
		rate := map[int]float64{}
		for _, agents := range []int{1, 3} {
			ns := fmt.Sprintf("bulk%d", agents)
			if err := f.env.Client.Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				b.Fatal(err)
			}
			for i := range nThroughput {
				benchTask(b, f, ns, fmt.Sprintf("t%04d", i), "[\"true\"]")
			}
			start := time.Now()
			for j := range agents {
				f.start(fmt.Sprintf("bulk%d-%d", agents, j), append(args, "--namespace", ns)...)
			}
			deadline := time.Now().Add(10 * time.Minute)
			for {
				var l kubeapi.TaskList
				if err := f.env.Client.List(f.ctx, &l, ctrlclient.InNamespace(ns)); err != nil {
					b.Fatal(err)
				}
				if allDone(l.Items) {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%d agents: not every task Done after 10 min", agents)
				}
				time.Sleep(100 * time.Millisecond)
			}
			took := time.Since(start)
			rate[agents] = nThroughput / took.Seconds()
			b.Logf("%d trivial tasks over %d agent(s): %v, %.1f tasks/s", nThroughput, agents, took.Round(time.Millisecond), rate[agents])
			for name, a := range f.agents {
				if len(name) > 4 && name[:4] == "bulk" {
					stopAgent(a)
				}
			}
		}
		b.ReportMetric(rate[1], "tasks/s-1agent")
		b.ReportMetric(rate[3], "tasks/s-3agents")
		b.ReportMetric(rate[3]/rate[1], "speedup-3/1")
		perNode := map[string]int{}
		var l kubeapi.TaskList
		if err := f.env.Client.List(f.ctx, &l, ctrlclient.InNamespace("bulk3")); err != nil {
			b.Fatal(err)
		}
		for _, t := range l.Items {
			perNode[t.Status.Claim.Node]++
		}
		keys := make([]string, 0, len(perNode))
		for k := range perNode {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.Logf("3 agents: %s ran %d tasks", k, perNode[k])
		}
	}
}

// benchTask creates a one-item task running command (a YAML flow list).
func benchTask(b testing.TB, f *farm, ns, name, command string) {
	b.Helper()
	doc := fmt.Sprintf(`
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s, namespace: %s}
spec:
  command: %s
  items: {count: 1}
  resources:
    fixed: {memory: 4Mi}
`, name, ns, command)
	var task kubeapi.Task
	if err := yaml.UnmarshalStrict([]byte(doc), &task); err != nil {
		b.Fatal(err)
	}
	if err := f.env.Client.Create(f.ctx, &task); err != nil {
		b.Fatal(err)
	}
}

// stopAgent stops an agent (SIGTERM) and waits for it.
func stopAgent(a *nodeAgent) {
	select {
	case <-a.done:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// waitLeases waits until n agents heartbeat (they watch the tasks by then).
func waitLeases(b testing.TB, f *farm, n int) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var l coordinationv1.LeaseList
		if err := f.env.Client.List(f.ctx, &l, ctrlclient.InNamespace("lardon3d")); err != nil {
			b.Fatal(err)
		}
		if len(l.Items) >= n {
			time.Sleep(500 * time.Millisecond) // the first heartbeat precedes the watch
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d agents heartbeat after a minute", len(l.Items), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
