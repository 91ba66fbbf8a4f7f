package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/agent"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

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

// TestNodeRetryAfterRestart: a Task that ended under an agent process
// that is gone is run again when its spec.retryToken changes: the
// restarted agent takes the reopened Task over (claim 2) and runs every
// item again (a Done task retried runs from its first item, as in the
// spool); before the change, a finished Task held by a former process was
// never looked at again. Each step is an Event on the Task.
func TestNodeRetryAfterRestart(t *testing.T) {
	f := newFarm(t)
	a := f.start("node-a", "--memory-capacity", "64Mi")
	f.createTask("again", 2, 2, "--cpu-per-item 1ms", "")
	f.waitFor("again Done", time.Minute, allDone)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-a.done
	before := len(f.runs())
	f.start("node-a", "--memory-capacity", "64Mi")
	var task kubeapi.Task
	if err := f.env.Client.Get(f.ctx, ctrlclient.ObjectKey{Namespace: nodeNS, Name: "again"}, &task); err != nil {
		t.Fatal(err)
	}
	ended := task.Status.SpecHash
	// The restarted agent leaves the finished task alone until it is retried.
	time.Sleep(3 * time.Second)
	if n := len(f.runs()); n != before {
		t.Fatalf("a finished task ran again before any retry: %d runs, %d before", n, before)
	}
	task.Spec.RetryToken = "retry-1"
	if err := f.env.Client.Update(f.ctx, &task); err != nil {
		t.Fatal(err)
	}
	ts := f.waitFor("again Done again, under the new spec", time.Minute, func(ts []kubeapi.Task) bool {
		return allDone(ts) && ts[0].Status.SpecHash != ended
	})
	if cl := ts[0].Status.Claim; cl == nil || cl.Node != "node-a" || cl.Seq != 2 {
		t.Errorf("claim %+v, want node-a's claim 2", cl)
	}
	items := int64(0)
	for _, r := range f.runs()[before:] {
		if r.task == "again" || strings.HasSuffix(r.task, "again") {
			items++
		}
	}
	if items == 0 {
		t.Errorf("no batch ran after the retry (runs %+v)", f.runs())
	}
	// What kubectl describe task shows: the Events on the Task, recorded
	// by each agent process (the first one's sent before it stopped).
	want := []string{agent.EventClaimed, agent.EventAdmitted, agent.EventCompleted, agent.EventReopened}
	var reasons []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var evs corev1.EventList
		if err := f.env.Client.List(f.ctx, &evs, ctrlclient.InNamespace(nodeNS)); err != nil {
			t.Fatal(err)
		}
		reasons = reasons[:0]
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Task" && e.InvolvedObject.Name == "again" && e.Source.Component == agent.EventComponent {
				reasons = append(reasons, e.Reason)
			}
		}
		missing := false
		for _, r := range want {
			missing = missing || !slices.Contains(reasons, r)
		}
		if !missing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Events on the task: %v, want each of %v", reasons, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	f.assertLogsClean()
}
