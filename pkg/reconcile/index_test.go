package reconcile

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// doneTask is a Done task as a run of `true` leaves it.
const doneTask = `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  name: t-00000
spec:
  command: ["/bin/true"]
  items: {count: 1}
  resources:
    fixed: {memory: 1Mi}
    threads: 1
status:
  completionTime: "2026-12-01T12:43:45Z"
  conditions:
  - lastTransitionTime: "2026-12-01T12:43:44Z"
    message: batch 1 of 1 asked, 1 threads, 1.0MiB reserved
    observedGeneration: 1
    reason: Admitted
    status: "True"
    type: Admitted
  - lastTransitionTime: "2026-12-01T12:43:45Z"
    message: all 1 items done in 1 batches
    observedGeneration: 1
    reason: Completed
    status: "True"
    type: Complete
  lastBatch:
    attempt: 1
    endTime: "2026-12-01T12:43:45Z"
    exitCode: 0
    index: 0
    peakMemory: "512Ki"
    size: 1
    start: 0
    startTime: "2026-12-01T12:43:45Z"
    threads: 1
    workingSet: "512Ki"
  logFile: "/tmp/s1/.lardon3d/logs/t-00000.log"
  observedGeneration: 1
  phase: Done
  progress:
    batchesDone: 1
    inputsHash: 971c3ef54fb33ad9
    itemsDone: 1
    itemsTotal: 1
  queueSeq: 1
  specHash: 15f1ecf3851f246a
  startTime: "2026-12-01T12:43:44Z"
`

// indexed is a list index, and set(i, v) sets the row of task t-i at
// version v (inode i+1, size and modification time v; itemsDone v too,
// so that a row read says which version it stands for).
func indexed(t *testing.T) (c *Controller, spoolDir string, set func(i int, v int64)) {
	t.Helper()
	spoolDir = filepath.Join(t.TempDir(), "spool")
	task, err := v1alpha1.ParseManifest("t.yaml", []byte(doneTask))
	if err != nil {
		t.Fatal(err)
	}
	c = &Controller{}
	set = func(i int, v int64) {
		tk := *task
		tk.Metadata.Name = fmt.Sprintf("t-%05d", i)
		tk.Status.Progress.ItemsDone = v
		c.index.set(filepath.Join(spoolDir, tk.Metadata.Name+".yaml"), &tk, listing.FileVersion{Inode: uint64(i + 1), Size: v, ModTime: v})
	}
	return c, spoolDir, set
}

// TestIndexedRowFollowsTheIndexWhileSet reads the controller's own rows
// (IndexedRow, what a served listing reads) from several goroutines while
// the owner sets and drops rows: every row read is whole (the version it
// names is the one its task says), a dropped row is gone, and once the
// owner stops each row is the last one set (RowOf the task it was set
// with). A row keeps the labels it was set with, whatever becomes of the
// task's map.
func TestIndexedRowFollowsTheIndexWhileSet(t *testing.T) {
	c, spool, set := indexed(t)
	const files, rounds = 200, 3000
	name := func(i int) string { return fmt.Sprintf("t-%05d.yaml", i) }
	for i := range files {
		set(i, 0)
	}
	stop := make(chan struct{})
	errs := make(chan error, 4)
	reads := make([]int, 4)
	for g := range reads {
		go func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				base := name(r.IntN(files))
				if row, ok := c.IndexedRow(base); ok {
					if v := row.Version.Size; row.Row.Done != v || base != row.Row.Name+".yaml" {
						errs <- fmt.Errorf("row of %s: version %v, task %s done %d", base, row.Version, row.Row.Name, row.Row.Done)
						return
					}
				}
				reads[g]++
			}
		}()
	}
	r := rand.New(rand.NewPCG(8, 9))
	last := map[int]int64{} // the version last set of each file; absent: dropped
	for i := range files {
		last[i] = 0
	}
	for k := 1; k < rounds; k++ {
		i := r.IntN(files)
		if r.IntN(10) == 0 {
			c.index.drop(filepath.Join(spool, name(i)))
			if _, ok := c.IndexedRow(name(i)); ok {
				t.Fatalf("%s still has a row once dropped", name(i))
			}
			delete(last, i)
		} else {
			set(i, int64(k))
			last[i] = int64(k)
		}
	}
	close(stop)
	for range reads {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if reads[0] < 10 {
		t.Errorf("only %v reads while the rows were set", reads)
	}
	for i := range files {
		own, ok := c.IndexedRow(name(i))
		v, set := last[i]
		if ok != set || ok && (own.Version.Size != v || own.Row.Done != v || own.Row.Name != fmt.Sprintf("t-%05d", i) || own.Row.Phase != v1alpha1.PhaseDone) {
			t.Errorf("%s: own row %+v (%v), want version %d (%v)", name(i), own, ok, v, set)
		}
	}

	task, err := v1alpha1.ParseManifest("l.yaml", []byte(doneTask))
	if err != nil {
		t.Fatal(err)
	}
	task.Metadata.Labels = map[string]string{"stage": "mesh"}
	c.index.set(filepath.Join(spool, "l.yaml"), task, listing.FileVersion{Inode: 1})
	task.Metadata.Labels["stage"] = "changed"
	if row, ok := c.IndexedRow("l.yaml"); !ok || row.Row.Labels["stage"] != "mesh" {
		t.Errorf("the row's labels follow the task's map: %+v", row)
	}
}

// TestIndexFollowsTheSpoolsEvents: a valid manifest's event sets its row
// at the version the event read, an invalid one's drops it, a rename
// moves it; a status written sets the row at the version stat finds after
// the write, and a file gone drops it.
func TestIndexFollowsTheSpoolsEvents(t *testing.T) {
	c := &Controller{}
	dir := t.TempDir()
	task, err := v1alpha1.ParseManifest("t.yaml", []byte(doneTask))
	if err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	id := spool.FileIdentity{Inode: 7, Size: 70}
	c.index.fileSeen(spool.Event{Type: spool.Added, Path: a, Task: task, Identity: id})
	if r, ok := c.IndexedRow("a.yaml"); !ok || r.Version != (listing.FileVersion{Inode: 7, Size: 70, ModTime: id.ModTime.UnixNano()}) || r.Row.Name != "t-00000" {
		t.Fatalf("after Added: %+v %v", r, ok)
	}
	c.index.fileSeen(spool.Event{Type: spool.Renamed, OldPath: a, Path: b, Task: task, Identity: id})
	if _, ok := c.IndexedRow("a.yaml"); ok {
		t.Errorf("the old name of a renamed manifest keeps its row")
	}
	if _, ok := c.IndexedRow("b.yaml"); !ok {
		t.Errorf("a renamed manifest has no row under its new name")
	}
	c.index.fileSeen(spool.Event{Type: spool.Modified, Path: b, Task: task, Err: fmt.Errorf("invalid"), Identity: id})
	if _, ok := c.IndexedRow("b.yaml"); ok {
		t.Errorf("an invalid manifest keeps a row")
	}
	if err := os.WriteFile(b, []byte("written"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := task.Status
	st.Phase = v1alpha1.PhaseRunning
	c.index.wrote(b, task, &st)
	want, err := listing.VersionOf(b)
	if r, ok := c.IndexedRow("b.yaml"); err != nil || !ok || r.Version != want || r.Row.Phase != v1alpha1.PhaseRunning {
		t.Errorf("after a status write: %+v %v, want version %+v (%v)", r, ok, want, err)
	}
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	c.index.wrote(b, task, &st)
	if _, ok := c.IndexedRow("b.yaml"); ok {
		t.Errorf("a status written to a file gone left a row")
	}
	if reflect.DeepEqual(task.Status, st) {
		t.Errorf("the task's own status was changed by wrote")
	}
}
