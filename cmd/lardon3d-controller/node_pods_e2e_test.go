package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube/kubetest"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
	"github.com/lardon3d/lardon3d-controller/pkg/podrunner"
)

// The Pod executor's end-to-end tests: a real kubelet over containerd and
// runc (kubetest.StartNode), the agent as the real binary acting as the
// DaemonSet's ServiceAccount, and each batch a Pod of the test image.

// podWatch records every batch Pod of the farm's namespace as the API
// server first shows it, and how each ended.
type podWatch struct {
	mu   sync.Mutex
	seen map[string]*corev1.Pod // by name, as first seen
	gone map[string]bool
	stop func()
}

func (f *farm) watchPods(cs kubernetes.Interface) *podWatch {
	f.t.Helper()
	w, err := cs.CoreV1().Pods(nodeNS).Watch(f.ctx, metav1.ListOptions{LabelSelector: podrunner.ManagedByLabel + "=" + podrunner.ManagedBy})
	if err != nil {
		f.t.Fatal(err)
	}
	pw := &podWatch{seen: map[string]*corev1.Pod{}, gone: map[string]bool{}, stop: w.Stop}
	f.t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			pw.mu.Lock()
			if _, ok := pw.seen[pod.Name]; !ok {
				pw.seen[pod.Name] = pod.DeepCopy()
			}
			if ev.Type == watch.Deleted {
				pw.gone[pod.Name] = true
			}
			pw.mu.Unlock()
		}
	}()
	return pw
}

// pods are the Pods seen, those whose GenerateName starts with prefix.
func (pw *podWatch) pods(prefix string) []*corev1.Pod {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	var out []*corev1.Pod
	for _, p := range pw.seen {
		if strings.HasPrefix(p.GenerateName, prefix) {
			out = append(out, p)
		}
	}
	return out
}

// podsOf are the Pods of the farm's namespace now.
func (f *farm) podsOf(cs kubernetes.Interface) []corev1.Pod {
	f.t.Helper()
	list, err := cs.CoreV1().Pods(nodeNS).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

// createPodTask creates a Task whose batches run script in the test image
// as uid 65534, on the host's network; resources are more lines of its
// resources block.
func (f *farm) createPodTask(name string, items, batchMax int, fixed, script, resources string) {
	f.t.Helper()
	f.createTaskYAML(fmt.Sprintf(`
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s, namespace: %s}
spec:
  command: [/bin/sh, -c, %q]
  items: {count: %d}
  resources:
    fixed: {memory: %s}
%s    threads: 1
    batch: {min: 1, max: %d}
  retries: 0
  pod:
    image: %s
    imagePullPolicy: Never
    hostNetwork: true
    runAsUser: 65534
    runAsGroup: 65534
    runAsNonRoot: true
`, name, nodeNS, script, items, fixed, resources, batchMax, kubetest.BatchImage))
}

// newPodFarm is a farm with a real node, kn1, whose agents act as the
// DaemonSet's ServiceAccount, an administrator's clientset, and the record
// of the batch Pods; the agents' logs are shown if the test fails.
func newPodFarm(t *testing.T) (*farm, kubernetes.Interface, *podWatch) {
	t.Helper()
	f := newFarm(t)
	kubetest.StartNode(t, f.env, "kn1")
	f.asServiceAccount()
	cs := kubernetes.NewForConfigOrDie(f.env.Config)
	pw := f.watchPods(cs)
	t.Cleanup(func() {
		if t.Failed() {
			f.dumpLogs()
		}
	})
	return f, cs, pw
}

// taskIs is a waitFor condition: the task name is in phase.
func taskIs(name string, phase v1alpha1.Phase) func([]kubeapi.Task) bool {
	return func(ts []kubeapi.Task) bool {
		for _, x := range ts {
			if x.Name == name {
				return x.Status.Phase == phase
			}
		}
		return false
	}
}

// startPodAgent starts the agent of a test node with the Pod executor. The
// test node has no CNI plugin, so its Node keeps the kubelet's not-ready
// taint (host-network Pods run all the same): the agent tolerates it.
func (f *farm) startPodAgent(name string, extra ...string) *nodeAgent {
	f.t.Helper()
	return f.start(name, append([]string{"--executor", "pod", "--tolerate-taint", "node.kubernetes.io/not-ready", "--wrapper-image", kubetest.BatchImage}, extra...)...)
}

// TestNodePodsRunEachBatchAsAPodOfItsContract: a Task of three batches runs
// as three Pods on the real kubelet, each bound to the node, owned by the
// Task, Guaranteed, its limits the batch's contract (the memory with its
// tolerance, the threads as cpu); each gets its items and the batch's
// variables and nothing of the agent's (no API token, no agent variable);
// each Pod is gone once its batch ended, and its output is in the task's
// log.
func TestNodePodsRunEachBatchAsAPodOfItsContract(t *testing.T) {
	f, cs, pw := newPodFarm(t)
	a := f.startPodAgent("kn1")
	script := `echo "batch $LARDON3D_BATCH_INDEX of $LARDON3D_TASK threads $LARDON3D_THREADS uid $(id -u)"
while read item; do echo "item $item"; done < "$LARDON3D_ITEMS_FILE"
if cat /var/run/secrets/kubernetes.io/serviceaccount/token >/dev/null 2>&1; then echo TOKEN-READABLE; else echo no-token; fi
env | grep -q -e '^NODE=' -e '^LARDON3D_STATE_DIR=' && echo AGENT-ENV-LEAKED
lardon3d-synth --fixed 24Mi --per-item 0 --hold 2s`
	f.createPodTask("three", 6, 2, "48Mi", script, "")
	ts := f.waitFor("three Done", 4*time.Minute, allDone)
	var done kubeapi.Task
	for _, x := range ts {
		if x.Name == "three" {
			done = x
		}
	}
	if got := done.Status.Progress.ItemsDone; got != 6 {
		t.Fatalf("items done %d, want 6", got)
	}
	// The wrapper reported each container's peak: at least the 24 MiB the
	// synthetic step held, within the Pod's limit.
	limit := int64(48<<20) + int64(48<<20)/10 + 1 // the contract plus 10 %, rounded up
	if lb := done.Status.LastBatch; lb == nil || lb.PeakMemory == nil || lb.PeakMemory.Value() < 24<<20 || lb.PeakMemory.Value() > limit {
		log, _ := os.ReadFile(filepath.Join(a.state, "logs", nodeNS+".three.log"))
		t.Errorf("last batch %+v: want a peak between 24MiB and the limit\n%s", lb, log)
	}

	pods := pw.pods("three-b")
	if len(pods) != 3 {
		t.Fatalf("%d Pods ran the task's batches, want 3 (one per batch)", len(pods))
	}
	var uid = done.UID
	contract := int64(48 << 20)
	wantMem := resource.NewQuantity(int64(float64(contract)*1.10), resource.BinarySI)
	batches := map[string]bool{}
	for _, p := range pods {
		if p.Spec.NodeName != "kn1" {
			t.Errorf("Pod %s bound to %q, want kn1", p.Name, p.Spec.NodeName)
		}
		if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != uid || p.OwnerReferences[0].Kind != "Task" {
			t.Errorf("Pod %s owners %+v, want the Task %s", p.Name, p.OwnerReferences, uid)
		}
		if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("Pod %s mounts an API token", p.Name)
		}
		c := p.Spec.Containers[0]
		lim, req := c.Resources.Limits, c.Resources.Requests
		if m := lim[corev1.ResourceMemory]; m.Cmp(*wantMem) != 0 {
			t.Errorf("Pod %s memory limit %s, want the contract 48Mi plus 10%% (%s)", p.Name, m.String(), wantMem.String())
		}
		if cpu := lim[corev1.ResourceCPU]; cpu.Value() != 1 {
			t.Errorf("Pod %s cpu limit %s, want the 1 thread granted", p.Name, cpu.String())
		}
		for name, q := range lim {
			if r := req[name]; r.Cmp(q) != 0 {
				t.Errorf("Pod %s requests %s %s, limit %s: want equal (Guaranteed)", p.Name, name, r.String(), q.String())
			}
		}
		batches[p.Annotations[podrunner.BatchAnnotation]] = true
	}
	if len(batches) != 3 {
		t.Errorf("the Pods ran %d distinct batches, want 3: %v", len(batches), batches)
	}
	// Each Pod is deleted when its batch ends.
	eventually(t, 30*time.Second, "no Pod left once the task is Done", func() bool { return len(f.podsOf(cs)) == 0 })
	// The task's log holds every batch's output.
	logPath := filepath.Join(a.state, "logs", nodeNS+".three.log")
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	for i := 0; i < 6; i++ {
		if !strings.Contains(log, fmt.Sprintf("item %d\n", i)) {
			t.Errorf("the task's log misses item %d:\n%s", i, log)
		}
	}
	for i := 0; i < 3; i++ {
		if !strings.Contains(log, fmt.Sprintf("batch %d of %s.three threads 1 uid 65534", i, nodeNS)) {
			t.Errorf("the task's log misses batch %d's line:\n%s", i, log)
		}
	}
	if strings.Count(log, "no-token") != 3 || strings.Contains(log, "TOKEN-READABLE") || strings.Contains(log, "AGENT-ENV-LEAKED") {
		t.Errorf("a batch could read an API token or the agent's environment:\n%s", log)
	}
}

// TestNodePodsOOMKilledRetriedAndDeletedWithTheirTask: a batch that
// allocates past its contract is OOMKilled by the kubelet's cgroup, and its
// task is retried under the measured need until it fits (Done); a batch's
// output is readable through the API server (kubectl logs) while it runs;
// deleting a Task deletes its running Pod.
func TestNodePodsOOMKilledRetriedAndDeletedWithTheirTask(t *testing.T) {
	f, cs, pw := newPodFarm(t)
	f.startPodAgent("kn1")
	// The allocator: the synthetic workload holds 80 MiB for 2 s, run as
	// the container's only process; the task states 40 MiB.
	f.createTaskYAML(fmt.Sprintf(`
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: grows, namespace: %s}
spec:
  command: [/bin/lardon3d-synth, --fixed, 80Mi, --hold, 2s]
  items: {count: 1}
  resources:
    fixed: {memory: 40Mi}
    threads: 1
  pod: {image: %s, imagePullPolicy: Never, hostNetwork: true, runAsUser: 65534, runAsNonRoot: true}
`, nodeNS, kubetest.BatchImage))
	f.createPodTask("long", 1, 1, "16Mi", `echo "long batch started"; sleep 300`, "")

	// The long batch's output, through the API server, while it runs.
	var running string
	eventually(t, 2*time.Minute, "the long task's Pod running", func() bool {
		for _, p := range f.podsOf(cs) {
			if strings.HasPrefix(p.Name, "long-b0-") && p.Status.Phase == corev1.PodRunning {
				running = p.Name
			}
		}
		return running != ""
	})
	eventually(t, time.Minute, "kubectl logs "+running+" to show the batch's output", func() bool {
		out, err := cs.CoreV1().Pods(nodeNS).GetLogs(running, &corev1.PodLogOptions{Container: podrunner.ContainerName}).DoRaw(f.ctx)
		return err == nil && strings.Contains(string(out), "long batch started")
	})
	// Deleting the Task deletes its running Pod.
	var long kubeapi.Task
	long.Name, long.Namespace = "long", nodeNS
	if err := f.env.Client.Delete(f.ctx, &long); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	eventually(t, time.Minute, "the deleted Task's Pod "+running+" to be gone", func() bool {
		_, err := cs.CoreV1().Pods(nodeNS).Get(f.ctx, running, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	t.Logf("the deleted Task's Pod was gone %v after the Task", time.Since(deleted).Round(time.Millisecond))

	// The allocator ends Done, after at least one Pod killed for memory.
	f.waitFor("grows Done", 4*time.Minute, taskIs("grows", v1alpha1.PhaseDone))
	pods := pw.pods("grows-b0-")
	if len(pods) < 2 {
		t.Fatalf("%d Pods ran grows' batch: want the one OOMKilled and at least one retry", len(pods))
	}
	var smallest, largest int64 = 1 << 62, 0
	for _, p := range pods {
		m := p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
		smallest, largest = min(smallest, m.Value()), max(largest, m.Value())
	}
	if want := int64(float64(40<<20) * 1.10); smallest != want {
		t.Errorf("the first Pod's memory limit %d, want the contract 40Mi plus 10%% (%d)", smallest, want)
	}
	if largest < 80<<20 {
		t.Errorf("the last Pod's memory limit %d is below what the batch allocates (80Mi), yet it succeeded", largest)
	}
	log, err := os.ReadFile(filepath.Join(f.agents["kn1"].state, "logs", nodeNS+".grows.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "reason MemoryExceeded peak ") || !strings.Contains(string(log), "the kubelet's cgroup killed it") {
		t.Errorf("grows' log says no batch was killed for memory:\n%s", log)
	}
}

// TestNodePodsCountWhatOtherPodsRequest: the governor counts what the
// kubelet counts. Items cost a sixteenth of the node's allocatable memory
// each; with another workload's Pod requesting all of it but five items'
// worth, a task of 8 items gets batches of at most 4 (their Pods request 4
// × 1.1 items' worth), where the machine alone would fit all 8 at once,
// and the kubelet admits every batch Pod.
func TestNodePodsCountWhatOtherPodsRequest(t *testing.T) {
	f, cs, pw := newPodFarm(t)
	var alloc int64
	eventually(t, time.Minute, "kn1 to publish its allocatable memory", func() bool {
		n, err := cs.CoreV1().Nodes().Get(f.ctx, "kn1", metav1.GetOptions{})
		if err == nil {
			alloc = n.Status.Allocatable.Memory().Value()
		}
		return alloc > 0
	})
	item := alloc / 16 &^ (1<<20 - 1) // whole MiB
	other := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "other-workload", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: "kn1", HostNetwork: true, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{
				Name: "sleep", Image: kubetest.BatchImage, ImagePullPolicy: corev1.PullNever,
				Command:   []string{"/bin/sleep", "600"},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(alloc-5*item, resource.BinarySI)}},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(f.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.startPodAgent("kn1")
	f.createPodTask("packed", 8, 8, "0", "true", fmt.Sprintf("    perItem: {memory: %dMi}\n", item>>20))
	f.waitFor("packed Done", 4*time.Minute, taskIs("packed", v1alpha1.PhaseDone))
	pods := pw.pods("packed-b")
	if len(pods) < 2 {
		t.Fatalf("%d batch Pods: want the 8 items cut to fit the 5 items' worth the other Pod leaves", len(pods))
	}
	for _, p := range pods {
		items := strings.Count(p.Annotations[podrunner.ItemsAnnotation], "\n")
		req := p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]
		if items > 4 || req.Value() > 5*item {
			t.Errorf("Pod %s runs %d items requesting %s: more than the %d bytes the other Pod leaves", p.Name, items, req.String(), 5*item)
		}
	}
}

// TestNodePodsPauseDeletesThePodAndResumeRunsItAgain: a Pod cannot be
// frozen, so pausing a task deletes its batch's Pod (the reservation
// kept, the task Paused) and resuming runs the same items in a new Pod.
// A task whose spec.pod.nodeSelector the node's labels do not match is
// not claimed until they do.
func TestNodePodsPauseDeletesThePodAndResumeRunsItAgain(t *testing.T) {
	f, cs, pw := newPodFarm(t)
	f.startPodAgent("kn1")
	f.createPodTask("nap", 2, 2, "16Mi", `echo "nap started"; sleep 8`, "")
	f.createTaskYAML(fmt.Sprintf(`
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: picky, namespace: %s}
spec:
  command: [/bin/true]
  items: {count: 1}
  resources: {fixed: {memory: 16Mi}}
  pod: {image: %s, imagePullPolicy: Never, hostNetwork: true, runAsUser: 65534, nodeSelector: {disk: ssd}}
`, nodeNS, kubetest.BatchImage))
	eventually(t, 2*time.Minute, "nap's batch Pod running", func() bool {
		pods := f.podsOf(cs)
		return len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning
	})
	setPaused := func(paused bool) {
		var task kubeapi.Task
		task.Name, task.Namespace = "nap", nodeNS
		patch := []byte(fmt.Sprintf(`{"spec":{"paused":%v}}`, paused))
		if err := f.env.Client.Patch(f.ctx, &task, ctrlclient.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	setPaused(true)
	f.waitFor("nap Paused", time.Minute, taskIs("nap", v1alpha1.PhasePaused))
	eventually(t, 2*time.Minute, "nap's Pod gone while paused", func() bool { return len(f.podsOf(cs)) == 0 })
	setPaused(false)
	f.waitFor("nap Done", 2*time.Minute, taskIs("nap", v1alpha1.PhaseDone))
	for _, x := range f.tasks() {
		if x.Name == "picky" && (x.Status.Claim != nil || x.Status.Phase == v1alpha1.PhaseDone) {
			t.Fatalf("picky was claimed by a node without its label: %+v", x.Status)
		}
	}
	if len(pw.pods("picky-")) != 0 {
		t.Fatal("a Pod ran picky on a node without its label")
	}
	node, err := cs.CoreV1().Nodes().Get(f.ctx, "kn1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Labels["disk"] = "ssd"
	if _, err := cs.CoreV1().Nodes().Update(f.ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("picky Done once kn1 has its label", time.Minute, allDone)
	pods := pw.pods("nap-b0-")
	if len(pods) != 2 {
		t.Fatalf("%d Pods ran the batch: want the one deleted at the pause and the one after it", len(pods))
	}
	if a, b := pods[0].Annotations[podrunner.BatchAnnotation], pods[1].Annotations[podrunner.BatchAnnotation]; a != b || pods[0].Annotations[podrunner.ItemsAnnotation] != pods[1].Annotations[podrunner.ItemsAnnotation] {
		t.Errorf("the resumed Pod runs another batch: %q, then %q", a, b)
	}
}
