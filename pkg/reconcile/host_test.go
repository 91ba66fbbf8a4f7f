package reconcile

import (
	"context"
	"fmt"
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

// hostSpools runs one Host over n fresh spools, each filled by fill, until
// every task is settled.
func hostSpools(t *testing.T, n int, fill func(i int, dir string)) ([]string, Outcome, *governor.Governor) {
	t.Helper()
	gov := governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1})
	snap := func() (governor.Snapshot, error) { return fixedMachine(), nil }
	base := t.TempDir()
	cfg := Config{ExitWhenDone: true, KillGrace: time.Second, HistoryPath: filepath.Join(base, "history.db")}
	h := NewHost(cfg, Deps{Governor: gov, Snapshot: snap, Logger: zerolog.New(zerolog.NewTestWriter(t))})
	var dirs []string
	for i := range n {
		dir := filepath.Join(base, fmt.Sprintf("spool%d", i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		fill(i, dir)
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

// One arrival order across spools: a task dropped in the second spool
// before one dropped in the first runs first.
func TestOneHostKeepsArrivalOrderAcrossSpools(t *testing.T) {
	order := filepath.Join(t.TempDir(), "order")
	var spools []string
	_, _, _ = hostSpools(t, 2, func(i int, dir string) {
		spools = append(spools, dir)
		// The second spool's task comes first (an earlier arrival number,
		// as a previous run would have written it).
		seq := 2 - i
		writeFile(t, filepath.Join(dir, "t.yaml"), manifest("t", fmt.Sprintf("echo %d >> %s", i, order),
			"  resources: {batch: {max: 4}, fixed: {memory: 5Gi}}\n")+
			fmt.Sprintf("status: {queueSeq: %d}\n", seq))
	})
	if got := strings.Fields(string(mustRead(t, order))); strings.Join(got, " ") != "1 0" {
		t.Errorf("ran in order %v, want [1 0] (the second spool's task arrived first)", got)
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
	gov := governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1})
	snap := func() (governor.Snapshot, error) { return fixedMachine(), nil }
	base := t.TempDir()
	cfg := Config{KillGrace: time.Second, HistoryPath: filepath.Join(base, "history.db")}
	h := NewHost(cfg, Deps{Governor: gov, Snapshot: snap, Logger: zerolog.New(zerolog.NewTestWriter(t))})
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
	first, sp := open("first")
	c := cfg
	c.SpoolDir = first
	h.Add(c, sp)
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
