package reconcile

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// testHost is a Host over n fresh spools (each filled by fill before it
// is added, nil: empty) on the fixed machine, not running yet.
func testHost(t *testing.T, cfg Config, n int, fill func(i int, dir string)) (*Host, []string, *governor.Governor) {
	t.Helper()
	gov := governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1})
	snap := func() (governor.Snapshot, error) { return fixedMachine(), nil }
	base := t.TempDir()
	cfg.KillGrace, cfg.HistoryPath = time.Second, filepath.Join(base, "history.db")
	h := NewHost(cfg, Deps{Governor: gov, Snapshot: snap, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	var dirs []string
	for i := range n {
		dir := filepath.Join(base, fmt.Sprintf("spool%d", i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if fill != nil {
			fill(i, dir)
		}
		sp, err := spool.Open(dir, spool.Options{Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sp.Close)
		c := cfg
		c.SpoolDir = dir
		h.Add(c, sp)
		dirs = append(dirs, dir)
	}
	return h, dirs, gov
}

// hostSpools runs one Host over n fresh spools, each filled by fill, until
// every task is settled.
func hostSpools(t *testing.T, n int, fill func(i int, dir string)) ([]string, Outcome, *governor.Governor) {
	t.Helper()
	h, dirs, gov := testHost(t, Config{ExitWhenDone: true}, n, fill)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := h.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the host did not settle within a minute")
	}
	return dirs, out, gov
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Two spools served by one host share one governor: tasks that each
// reserve more than half the memory never run at once, whichever spool
// they come from; names are the spool's own (both spools have a and b,
// b depending on its own spool's a), and no message shows the queue's
// spool prefix.
func TestOneHostNeverOvercommitsAcrossSpools(t *testing.T) {
	spans := filepath.Join(t.TempDir(), "spans")
	cmd := func(tag string) string {
		return "echo " + tag + " start $(date +%s%N) >> " + spans + "; sleep 0.2; echo " + tag + " end $(date +%s%N) >> " + spans
	}
	dirs, out, gov := hostSpools(t, 2, func(i int, dir string) {
		for _, name := range []string{"a", "b"} {
			extra := "  resources: {batch: {max: 4}, fixed: {memory: 5Gi}}\n"
			if name == "b" {
				extra += "  dependsOn: [a]\n"
			}
			writeFile(t, filepath.Join(dir, name+".yaml"), manifest(name, cmd(fmt.Sprintf("s%d-%s", i, name)), extra))
		}
		writeFile(t, filepath.Join(dir, "c.yaml"), manifest("c", "true", fmt.Sprintf("  dependsOn: [missing%d]\n", i)))
	})
	if out.AllDone || len(out.Tasks) != 6 {
		t.Fatalf("outcome: AllDone %v, %d tasks (want 6, c of each spool held)", out.AllDone, len(out.Tasks))
	}
	for _, dir := range dirs {
		for _, name := range []string{"a", "b"} {
			task, err := v1alpha1.ParseManifest(name+".yaml", mustRead(t, filepath.Join(dir, name+".yaml")))
			if task == nil {
				t.Fatal(err)
			}
			if task.Status.Phase != v1alpha1.PhaseDone {
				t.Errorf("%s/%s: %s, want Done", dir, name, task.Status.Phase)
			}
		}
		c, _ := v1alpha1.ParseManifest("c.yaml", mustRead(t, filepath.Join(dir, "c.yaml")))
		cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionDependenciesReady)
		if cond == nil || cond.Reason != v1alpha1.ReasonDependencyMissing || strings.Contains(cond.Message, "\x1f") {
			t.Errorf("%s/c: dependency condition %+v, want DependencyMissing without the queue's prefix", dir, cond)
		}
	}
	// Spans from the tasks themselves: sorted by time, starts and ends
	// alternate (one task at a time), and each spool's b follows its a.
	type mark struct {
		tag, what string
		at        int64
	}
	var marks []mark
	for _, line := range strings.Split(strings.TrimSpace(string(mustRead(t, spans))), "\n") {
		f := strings.Fields(line)
		at, err := strconv.ParseInt(f[2], 10, 64)
		if len(f) != 3 || err != nil {
			t.Fatalf("span line %q", line)
		}
		marks = append(marks, mark{f[0], f[1], at})
	}
	sort.Slice(marks, func(i, j int) bool { return marks[i].at < marks[j].at })
	if len(marks) != 8 {
		t.Fatalf("%d marks, want 8 (4 tasks, one batch each): %v", len(marks), marks)
	}
	seen := map[string]int{}
	for i, m := range marks {
		want := "start"
		if i%2 == 1 {
			want = "end"
		}
		if m.what != want {
			t.Fatalf("two tasks of 5Gi ran at once on an 8Gi machine: %v", marks)
		}
		seen[m.tag] = i
	}
	for i := range dirs {
		if a, b := seen[fmt.Sprintf("s%d-a", i)], seen[fmt.Sprintf("s%d-b", i)]; b < a {
			t.Errorf("spool %d: b ran before its a", i)
		}
	}
	if v := gov.Budgets(); v.Reservations != 0 || v.Memory.Reserved != 0 {
		t.Errorf("after the run: %d reservations, %d bytes reserved", v.Reservations, v.Memory.Reserved)
	}
}

// One arrival order across spools: while a task holds the memory, a task
// dropped in the second spool, then one in the first, run in that order.
func TestOneHostKeepsArrivalOrderAcrossSpools(t *testing.T) {
	order := filepath.Join(t.TempDir(), "order")
	gate := filepath.Join(t.TempDir(), "gate")
	h, dirs, gov := testHost(t, Config{ExitWhenDone: true, WaitForTasks: 5}, 2, nil)
	big := "  resources: {batch: {max: 4}, fixed: {memory: 5Gi}}\n"
	// The blocker holds 5Gi of 8 until the gate opens. The second spool
	// had two tasks already: numbered per spool, its new task would come
	// after the first spool's.
	writeFile(t, filepath.Join(dirs[0], "blocker.yaml"), manifest("blocker", "while [ ! -e "+gate+" ]; do sleep 0.02; done", big))
	for _, n := range []string{"x", "y"} {
		writeFile(t, filepath.Join(dirs[1], n+".yaml"), manifest(n, "true", "  resources: {fixed: {memory: 16Mi}}\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan Outcome, 1)
	go func() { out, _ := h.Run(ctx); done <- out }()
	deadline := time.Now().Add(20 * time.Second)
	for gov.Budgets().Reservations == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	writeFile(t, filepath.Join(dirs[1], "t.yaml"), manifest("t", "echo 1 >> "+order, big))
	for time.Now().Before(deadline) { // the first arrival is queued before the second comes
		if task, _ := v1alpha1.ParseManifest("t.yaml", mustRead(t, filepath.Join(dirs[1], "t.yaml"))); task != nil && task.Status.QueueSeq > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	writeFile(t, filepath.Join(dirs[0], "t.yaml"), manifest("t", "echo 0 >> "+order, big))
	time.Sleep(200 * time.Millisecond)
	writeFile(t, gate, "")
	out := <-done
	if !out.AllDone {
		t.Fatalf("not every task Done: %+v", out.Tasks)
	}
	if got := strings.Fields(string(mustRead(t, order))); strings.Join(got, " ") != "1 0" {
		t.Errorf("ran in order %v, want [1 0]: the second spool's task arrived first", got)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A spool joined while the host runs (a pattern matched it later) is
// served like the others: its task runs, under the same governor; once
// Run has stopped, Join refuses.
func TestASpoolJoinsARunningHost(t *testing.T) {
	h, _, _ := testHost(t, Config{}, 1, nil)
	base := t.TempDir()
	cfg := Config{KillGrace: time.Second}
	open := func(name string) (string, *spool.Spool) {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		sp, err := spool.Open(dir, spool.Options{Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sp.Close)
		return dir, sp
	}
	c := cfg
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := h.Run(ctx); done <- err }()

	late, sp2 := open("late")
	writeFile(t, filepath.Join(late, "t.yaml"), manifest("t", "true", ""))
	c.SpoolDir = late
	deadline := time.Now().Add(10 * time.Second)
	var err error
	for {
		// Run may not have started accepting yet.
		if _, err = h.Join(c, sp2); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline) {
		task, _ := v1alpha1.ParseManifest("t.yaml", mustRead(t, filepath.Join(late, "t.yaml")))
		if task != nil && task.Status.Phase == v1alpha1.PhaseDone {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if task, _ := v1alpha1.ParseManifest("t.yaml", mustRead(t, filepath.Join(late, "t.yaml"))); task == nil || task.Status.Phase != v1alpha1.PhaseDone {
		t.Fatalf("the joined spool's task did not run: %+v", task)
	}
	if _, err := os.Stat(filepath.Join(late, ".lardon3d", "logs", "t.log")); err != nil {
		t.Errorf("the joined spool keeps its own state directory: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, sp3 := open("after")
	c.SpoolDir = filepath.Join(base, "after")
	if _, err := h.Join(c, sp3); err == nil {
		t.Error("Join after Run stopped: no error")
	}
}

// Randomized (fixed seed): three spools served by one host, thirty tasks
// of random declared memory (1 to 5 GiB on an 8 GiB machine) and random
// dependencies within their spool. The batches' own marks (start, end,
// LARDON3D_MEMORY_LIMIT) never show more memory in use at once than the
// machine has, every task ends Done, and every dependency ended first.
func TestOneHostRandomizedNeverOvercommits(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 3))
	spans := filepath.Join(t.TempDir(), "spans")
	type plan struct {
		spool int
		name  string
		deps  []string
	}
	var plans []plan
	_, out, gov := hostSpools(t, 3, func(i int, dir string) {
		for n := range 10 {
			name := fmt.Sprintf("t%d", n)
			var deps []string
			if n > 0 && rng.IntN(3) == 0 {
				deps = append(deps, fmt.Sprintf("t%d", rng.IntN(n)))
			}
			extra := fmt.Sprintf("  resources: {batch: {max: 4}, fixed: {memory: %dGi}}\n", 1+rng.IntN(5))
			if len(deps) > 0 {
				extra += "  dependsOn: [" + strings.Join(deps, ", ") + "]\n"
			}
			tag := fmt.Sprintf("s%d-%s", i, name)
			cmd := "echo " + tag + " start $(date +%s%N) $LARDON3D_MEMORY_LIMIT >> " + spans +
				"; sleep 0.0" + strconv.Itoa(1+rng.IntN(5)) + "; echo " + tag + " end $(date +%s%N) $LARDON3D_MEMORY_LIMIT >> " + spans
			writeFile(t, filepath.Join(dir, name+".yaml"), manifest(name, cmd, extra))
			plans = append(plans, plan{i, name, deps})
		}
	})
	if !out.AllDone || len(out.Tasks) != 30 {
		t.Fatalf("AllDone %v with %d tasks, want every one of 30 Done", out.AllDone, len(out.Tasks))
	}
	type mark struct {
		tag, what string
		at, mem   int64
	}
	var marks []mark
	for _, line := range strings.Split(strings.TrimSpace(string(mustRead(t, spans))), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("span line %q", line)
		}
		at, err1 := strconv.ParseInt(f[2], 10, 64)
		mem, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("span line %q", line)
		}
		marks = append(marks, mark{f[0], f[1], at, mem})
	}
	sort.SliceStable(marks, func(i, j int) bool {
		if marks[i].at != marks[j].at {
			return marks[i].at < marks[j].at
		}
		return marks[i].what == "end" // an end and a start at once: the end first
	})
	var inUse, peak int64
	ended := map[string]int64{}
	started := map[string]int64{}
	for _, m := range marks {
		if m.what == "start" {
			inUse += m.mem
			if _, ok := started[m.tag]; !ok {
				started[m.tag] = m.at
			}
		} else {
			inUse -= m.mem
			ended[m.tag] = m.at
		}
		peak = max(peak, inUse)
	}
	if capacity := fixedMachine().MemTotal; peak > capacity {
		t.Errorf("batches held %d MiB at once on a %d MiB machine", peak>>20, capacity>>20)
	}
	for _, p := range plans {
		for _, d := range p.deps {
			tag, dep := fmt.Sprintf("s%d-%s", p.spool, p.name), fmt.Sprintf("s%d-%s", p.spool, d)
			if started[tag] < ended[dep] {
				t.Errorf("%s started before its dependency %s ended", tag, dep)
			}
		}
	}
	if v := gov.Budgets(); v.Reservations != 0 || v.Memory.Reserved != 0 {
		t.Errorf("after the run: %d reservations, %d bytes reserved", v.Reservations, v.Memory.Reserved)
	}
	t.Logf("peak %d MiB of %d MiB over %d batches", peak>>20, fixedMachine().MemTotal>>20, len(marks)/2)
}
