package reconcile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/internal/testseed"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// recordingSpool remembers every status written, per file (the fields the
// invariants read).
type recordingSpool struct {
	Spool
	mu      sync.Mutex
	written map[string][]v1alpha1.TaskStatus
	reborn  map[string]bool
}

func (r *recordingSpool) WriteStatus(path string, st *v1alpha1.TaskStatus) error {
	err := r.Spool.WriteStatus(path, st)
	if err == nil {
		r.mu.Lock()
		r.written[path] = append(r.written[path], v1alpha1.TaskStatus{
			Phase: st.Phase, ObservedGeneration: st.ObservedGeneration, SpecHash: st.SpecHash, Progress: st.Progress})
		r.mu.Unlock()
	}
	return err
}

// forget stops checking the generations of a file that was deleted: a
// version that comes back soon may continue the task (a rename or an
// editor's save) or start a new one, at the spool's discretion.
func (r *recordingSpool) forget(path string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reborn[path] = true
}

// lifecycleTask is the test's model of one manifest.
type lifecycleTask struct {
	name, dep string
	mark      int // identifies the spec version; every edit takes a new one
	count     int
	exit      int
	paused    bool
	present   bool
}

func (lt *lifecycleTask) body(out string) string {
	deps := ""
	if lt.dep != "" {
		deps = "  dependsOn: [" + lt.dep + "]\n"
	}
	return fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: %s}\nspec:\n"+
		"  command: [sh, -c, 'echo M%d $LARDON3D_TASK $LARDON3D_BATCH_START $LARDON3D_BATCH_SIZE >> %s; sleep 0.02; exit %d']\n"+
		"  items: {count: %d}\n  resources: {batch: {max: %d}}\n  retries: 1\n  paused: %v\n%s",
		lt.name, lt.mark, out, lt.exit, lt.count, min(2, lt.count), lt.paused, deps)
}

// TestRandomLifecycles drives random sequences of user and machine events —
// spec edits, pauses and resumes, deletions and re-creations, failing
// batches, controller restarts — against the real queue, reconciler, spool
// and processes, then asserts:
//
//   - no phase transition the table forbids was made or even attempted;
//   - a generation is applied whole: in every file, one generation number
//     has one spec hash, generations never go back, and every batch that
//     ran fits the item count of the spec version that launched it;
//   - no commit is lost: within a generation, the committed items written
//     never decrease;
//   - in the end, with every task unpaused and fixed, every task is Done at
//     the generation of its file's spec, with all its items.
//
// make test runs three fixed seeds; LARDON3D_RANDOM_SEED=random with
// LARDON3D_LIFECYCLE_ROUNDS=N runs N rounds of fresh seeds.
func TestRandomLifecycles(t *testing.T) {
	rounds := testseed.Count(t, "LARDON3D_LIFECYCLE_ROUNDS", 1)
	sequences := 0
	for _, seed := range testseed.Seeds(t, 1, 2, 3) {
		for r := 0; r < rounds; r++ {
			s := seed + uint64(r)*1000003
			t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) { runLifecycle(t, s) })
			sequences++
		}
	}
	t.Logf("%d event sequences", sequences)
}

func runLifecycle(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x11fec7c1e))
	logs := &syncBuffer{}
	rec := &recordingSpool{written: make(map[string][]v1alpha1.TaskStatus), reborn: make(map[string]bool)}
	h := newHarness(t, Config{})
	h.logs = logs
	h.wrap = func(s Spool) Spool { rec.Spool = s; return rec }
	out := filepath.Join(t.TempDir(), "out")
	tasks := []*lifecycleTask{
		{name: "a", count: 3 + rng.IntN(4)},
		{name: "b", dep: "a", count: 2 + rng.IntN(4)},
		{name: "c", count: 2 + rng.IntN(5)},
	}
	marks := map[int]int{} // mark → item count of that spec version
	nextMark := 0
	write := func(lt *lifecycleTask) {
		nextMark++
		lt.mark = nextMark
		marks[lt.mark] = lt.count
		if !lt.present {
			rec.forget(filepath.Join(h.dir, lt.name+".yaml"))
		}
		lt.present = true
		h.write(lt.name+".yaml", lt.body(out))
	}
	for _, lt := range tasks {
		write(lt)
	}
	h.start()
	steps := 12 + rng.IntN(10)
	var ops []string
	for i := 0; i < steps; i++ {
		lt := tasks[rng.IntN(len(tasks))]
		switch op := rng.IntN(10); {
		case op < 3: // edit the command (and sometimes the items)
			if rng.IntN(2) == 0 {
				lt.count = 1 + rng.IntN(6)
			}
			write(lt)
			ops = append(ops, fmt.Sprintf("edit %s count=%d", lt.name, lt.count))
		case op < 5 && lt.present: // pause or resume: the same spec version
			lt.paused = !lt.paused
			h.write(lt.name+".yaml", lt.body(out))
			ops = append(ops, fmt.Sprintf("paused %s=%v", lt.name, lt.paused))
		case op == 5: // a failing version (retried once, then Failed)
			lt.exit = 1
			write(lt)
			ops = append(ops, "fail "+lt.name)
		case op == 6: // delete, or re-create
			if lt.present {
				lt.present = false
				_ = os.Remove(filepath.Join(h.dir, lt.name+".yaml"))
				ops = append(ops, "delete "+lt.name)
			} else {
				write(lt)
				ops = append(ops, "create "+lt.name)
			}
		case op == 7:
			h.restart()
			ops = append(ops, "restart")
		default:
			ops = append(ops, "wait")
		}
		time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
	}
	t.Logf("ops: %s", strings.Join(ops, "; "))
	// Everything fixed, unpaused and present: it must all end Done.
	for _, lt := range tasks {
		lt.exit, lt.paused = 0, false
		write(lt)
	}
	settled := func() string {
		for _, lt := range tasks {
			st := h.status(lt.name + ".yaml")
			data, _ := os.ReadFile(filepath.Join(h.dir, lt.name+".yaml"))
			task, _ := v1alpha1.ParseManifest(lt.name+".yaml", data)
			if st.Phase != v1alpha1.PhaseDone || st.Progress.ItemsDone != int64(lt.count) || task == nil || st.SpecHash != v1alpha1.SpecHash(task.Spec) {
				return fmt.Sprintf("%s: %s gen %d, %d/%d items, conditions %+v", lt.name, st.Phase, st.ObservedGeneration, st.Progress.ItemsDone, lt.count, st.Conditions)
			}
		}
		return ""
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left := settled()
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every task Done at its file's generation: %s", left)
		}
	}
	h.stop()
	<-h.done
	h.done <- Outcome{}

	checkTransitions(t, logs)
	// Every batch fits the spec version that ran it.
	data, _ := os.ReadFile(out)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("output line %q", line)
		}
		mark, _ := strconv.Atoi(strings.TrimPrefix(f[0], "M"))
		start, _ := strconv.Atoi(f[2])
		size, _ := strconv.Atoi(f[3])
		if n, ok := marks[mark]; !ok || start < 0 || size < 1 || start+size > n {
			t.Errorf("batch %q ran outside its spec version (%d items): a half-applied generation", line, n)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for path, sts := range rec.written {
		if rec.reborn[path] {
			continue
		}
		hashOf := map[int64]string{}
		var lastGen, lastDone int64
		for i, st := range sts {
			if st.ObservedGeneration < lastGen {
				t.Errorf("%s write %d: generation %d after %d", filepath.Base(path), i, st.ObservedGeneration, lastGen)
			}
			if h, ok := hashOf[st.ObservedGeneration]; ok && h != st.SpecHash {
				t.Errorf("%s write %d: generation %d with two specs (%s, %s)", filepath.Base(path), i, st.ObservedGeneration, h, st.SpecHash)
			}
			hashOf[st.ObservedGeneration] = st.SpecHash
			if st.ObservedGeneration == lastGen && st.Progress.ItemsDone < lastDone {
				t.Errorf("%s write %d: committed items went back from %d to %d in generation %d", filepath.Base(path), i, lastDone, st.Progress.ItemsDone, lastGen)
			}
			if st.Progress.ItemsDone > st.Progress.ItemsTotal {
				t.Errorf("%s write %d: %d of %d items", filepath.Base(path), i, st.Progress.ItemsDone, st.Progress.ItemsTotal)
			}
			lastGen, lastDone = st.ObservedGeneration, st.Progress.ItemsDone
		}
	}
}
