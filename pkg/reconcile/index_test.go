package reconcile

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
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

// indexOf writes an index of n Done tasks for spool under stateDir.
func indexOf(tb testing.TB, stateDir, spool string, n int) {
	tb.Helper()
	task, err := v1alpha1.ParseManifest("t.yaml", []byte(doneTask))
	if err != nil {
		tb.Fatal(err)
	}
	var x listIndex
	for i := 0; i < n; i++ {
		t := *task
		t.Metadata.Name = fmt.Sprintf("t-%05d", i)
		x.set(filepath.Join(spool, t.Metadata.Name+".yaml"), &t)
	}
	if err := writeIndex(stateDir, spool, x.rows); err != nil {
		tb.Fatal(err)
	}
}

// TestReadIndex: the rows come back under their file names; an index of
// another spool, or one whose writer is gone, is refused.
func TestReadIndex(t *testing.T) {
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool")
	indexOf(t, dir, spool, 3)
	idx, err := ReadIndex(dir, spool)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx) != 3 || idx["t-00002.yaml"] == nil || idx["t-00002.yaml"].Metadata.Name != "t-00002" || idx["t-00002.yaml"].Status.Phase != v1alpha1.PhaseDone {
		t.Fatalf("index read back: %v", idx)
	}
	if _, err := ReadIndex(dir, filepath.Join(dir, "other")); err == nil {
		t.Errorf("the index of another spool was taken")
	}
	// A header naming a process that no longer runs (pid 1's start time
	// is not ours).
	path := filepath.Join(dir, IndexFile)
	data, _ := os.ReadFile(path)
	start, _ := procStart(os.Getpid())
	forged := []byte(fmt.Sprintf(`{"version":1,"pid":1,"start":%d,"spool":%q}`, start, spool))
	for i, c := range data {
		if c == '\n' {
			data = append(forged, data[i:]...)
			break
		}
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIndex(dir, spool); err == nil {
		t.Errorf("an index naming another process was taken")
	}
}

// BenchmarkReadIndex is what get pays to list 10,000 tasks from the index.
func BenchmarkReadIndex(b *testing.B) {
	dir := b.TempDir()
	spool := filepath.Join(dir, "spool")
	indexOf(b, dir, spool, 10000)
	st, _ := os.Stat(filepath.Join(dir, IndexFile))
	b.ReportMetric(float64(st.Size())/10000, "B/row")
	for b.Loop() {
		if idx, err := ReadIndex(dir, spool); err != nil || len(idx) != 10000 {
			b.Fatal(len(idx), err)
		}
	}
}
