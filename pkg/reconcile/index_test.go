package reconcile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lardon3d/lardon3d-controller/internal/testseed"
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
		x.set(filepath.Join(spool, t.Metadata.Name+".yaml"), &t, FileVersion{Inode: uint64(i + 1), Size: 1000, ModTime: int64(i) * 1e9})
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
	row := idx["t-00002.yaml"]
	if len(idx) != 3 || row.Task == nil || row.Task.Metadata.Name != "t-00002" || row.Task.Status.Phase != v1alpha1.PhaseDone || row.Version != (FileVersion{Inode: 3, Size: 1000, ModTime: 2e9}) {
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
	forged := []byte(fmt.Sprintf(`{"version":3,"pid":1,"start":%d,"spool":%q}`, start, spool))
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

// TestIndexRowRoundTrip: any row, strings with tabs, newlines, quotes and
// any bytes included, parses back from its line as it was written.
func TestIndexRowRoundTrip(t *testing.T) {
	for _, seed := range testseed.Seeds(t, 1, 2) {
		r := rand.New(rand.NewPCG(seed, 15))
		str := func() string {
			b := make([]byte, r.IntN(6))
			for i := range b {
				const alphabet = "a\t\n\"\\- é\x00"
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
			return string(b)
		}
		ints := func() []int64 {
			v := make([]int64, r.IntN(4))
			for i := range v {
				v[i] = r.Int64() - r.Int64()
			}
			if len(v) == 0 {
				return nil
			}
			return v
		}
		for n := 0; n < 2000; n++ {
			row := indexRow{File: "f" + str(), Version: FileVersion{Inode: r.Uint64() >> 1, Size: r.Int64(), ModTime: r.Int64() - r.Int64()}, Name: str(), Profile: str(), Phase: str(),
				Gen: r.Int64(), Seq: -r.Int64N(5), Done: r.Int64N(9), Total: r.Int64N(9),
				Reservation: ints(), LastBatch: ints()}
			if r.IntN(2) == 0 {
				s := r.Int64() - r.Int64()
				row.Start = &s
			}
			for k := r.IntN(3) * 2; k > 0; k-- {
				row.Conditions = append(row.Conditions, str())
			}
			if k := r.IntN(3); k > 0 {
				row.Labels = map[string]string{}
				for ; k > 0; k-- {
					row.Labels[str()] = str()
				}
			}
			line := appendRow(nil, &row)
			if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
				t.Fatalf("seed %d: line %q is not one line", seed, line)
			}
			got, err := parseRow(string(line[:len(line)-1]))
			if err != nil || !reflect.DeepEqual(got, row) {
				t.Fatalf("seed %d: %q\nwrote %+v\nread  %+v (%v)", seed, line, row, got, err)
			}
		}
	}
	for _, bad := range []string{"", "x", `"f"`, `"f"	1	2	3	"n"	"p"	"ph"	1	2	3	4	9	0	-	0	0`, `"f"	1	2	3	"n"	"p"	"ph"	1	2	3	4	0	0	-	0	0	extra`, `"f"	1	2	"n"	"p"	"ph"	1	2	3	4	0	0	-	0	0`} {
		if _, err := parseRow(bad); err == nil {
			t.Errorf("parseRow(%q) accepted", bad)
		}
	}
}
