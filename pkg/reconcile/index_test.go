package reconcile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/internal/testseed"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
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
	f, _, err := writeIndex(stateDir, spool, x.rows)
	if err != nil {
		tb.Fatal(err)
	}
	_ = f.Close()
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
	if len(idx) != 3 || row == nil || row.Row.Name != "t-00002" || row.Row.Phase != v1alpha1.PhaseDone || row.Version != (FileVersion{Inode: 3, Size: 1000, ModTime: 2e9}) {
		t.Fatalf("index read back: %v", idx)
	}
	if _, err := ReadIndex(dir, filepath.Join(dir, "other")); err == nil {
		t.Errorf("the index of another spool was taken")
	}
	// A header naming a process that no longer runs (pid 1's start time
	// is not ours).
	path := filepath.Join(dir, IndexFile)
	data, _ := os.ReadFile(path)
	start, _ := runner.StartTicks(procfs.DefaultMountPoint, os.Getpid())
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
		num := func() int64 { return r.Int64() - r.Int64() }
		for n := 0; n < 2000; n++ {
			row := indexRow{File: "f" + str(), Version: FileVersion{Inode: r.Uint64() >> 1, Size: r.Int64(), ModTime: num()}, ListRow: ListRow{Name: str(), Profile: str(), Phase: v1alpha1.Phase(str()),
				Gen: r.Int64(), Seq: -r.Int64N(5), Done: r.Int64N(9), Total: r.Int64N(9)}}
			if r.IntN(2) == 0 {
				row.Reservation = &RowContract{Batch: num(), BatchRequested: num(), Threads: num(), Memory: num()}
			}
			if r.IntN(2) == 0 {
				row.LastBatch = &RowBatch{Index: num(), PeakMemory: num(), Size: num(), Start: num(), End: num(), ItemsReported: num()}
			}
			if r.IntN(2) == 0 {
				s := num()
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
	for _, bad := range []string{"", "x", `"f"`, `"f"	1	2	3	"n"	"p"	"ph"	1	2	3	4	9	0	-	0	0`, `"f"	1	2	3	"n"	"p"	"ph"	1	2	3	4	0	0	-	0	0	extra`, `"f"	1	2	"n"	"p"	"ph"	1	2	3	4	0	0	-	0	0`,
		`"f"	1	2	3	"n"	"p"	"ph"	1	2	3	4	3	1	2	3	0	-	0	0`,   // a contract of three numbers
		`"f"	1	2	3	"n"	"p"	"ph"	1	2	3	4	0	4	1	2	3	4	-	0	0`, // a last batch of four
	} {
		if _, err := parseRow(bad); err == nil {
			t.Errorf("parseRow(%q) accepted", bad)
		}
	}
}

// publisher is a controller that publishes only its list index, in a
// temporary state directory, and set(i, v) sets the row of task t-i at
// version v (inode i+1, size and modification time v; itemsDone v too,
// so that a row read says which version it stands for).
func publisher(t *testing.T) (c *Controller, dir, spool string, set func(i int, v int64)) {
	t.Helper()
	dir = t.TempDir()
	spool = filepath.Join(dir, "spool")
	task, err := v1alpha1.ParseManifest("t.yaml", []byte(doneTask))
	if err != nil {
		t.Fatal(err)
	}
	c = &Controller{cfg: Config{StateDir: dir, SpoolDir: spool}, log: zerolog.Nop()}
	t.Cleanup(c.index.closeFile)
	set = func(i int, v int64) {
		tk := *task
		tk.Metadata.Name = fmt.Sprintf("t-%05d", i)
		tk.Status.Progress.ItemsDone = v
		c.index.set(filepath.Join(spool, tk.Metadata.Name+".yaml"), &tk, FileVersion{Inode: uint64(i + 1), Size: v, ModTime: v})
	}
	return c, dir, spool, set
}

// TestIndexAppendsBetweenRewrites: between two rewrites of the list index,
// the rows set since the last publish are appended to the same file and a
// reader takes each file's last row; an unterminated last line (an append
// under way) is left; after IndexEvery, or once the appended part outgrows
// a quarter of the file, it is rewritten whole, one row per file again.
func TestIndexAppendsBetweenRewrites(t *testing.T) {
	c, dir, spool, set := publisher(t)
	path := filepath.Join(dir, IndexFile)
	inode := func() uint64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	read := func() map[string]*IndexedTask {
		idx, err := ReadIndex(dir, spool)
		if err != nil {
			t.Fatal(err)
		}
		return idx
	}
	lines := func() int {
		data, _ := os.ReadFile(path)
		return bytes.Count(data, []byte("\n"))
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 10 {
		set(i, 100)
	}
	c.publishIndex(now)
	first := inode()
	if idx := read(); len(idx) != 10 || lines() != 11 {
		t.Fatalf("first publish: %d rows, %d lines", len(idx), lines())
	}
	// Two rows change: appended, not before indexAppendEvery.
	set(3, 200)
	set(7, 200)
	if wait := c.publishIndex(now.Add(time.Millisecond)); wait <= 0 || lines() != 11 {
		t.Fatalf("appended before indexAppendEvery (wait %v, %d lines)", wait, lines())
	}
	c.publishIndex(now.Add(indexAppendEvery))
	idx := read()
	if inode() != first || lines() != 13 || len(idx) != 10 || idx["t-00003.yaml"].Version.Size != 200 || idx["t-00007.yaml"].Version.Size != 200 || idx["t-00004.yaml"].Version.Size != 100 {
		t.Fatalf("after an append: inode %d (was %d), %d lines, rows %v", inode(), first, lines(), idx)
	}
	// A torn append: the rows before it stand.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	row := c.index.rows["t-00005.yaml"]
	_, _ = f.Write(row[:len(row)/2])
	_ = f.Close()
	if idx := read(); len(idx) != 10 || idx["t-00003.yaml"].Version.Size != 200 {
		t.Fatalf("with a torn last line: %v", idx)
	}
	// IndexEvery after the first: rewritten whole.
	set(3, 300)
	c.publishIndex(now.Add(IndexEvery))
	if idx := read(); inode() == first || lines() != 11 || idx["t-00003.yaml"].Version.Size != 300 || idx["t-00007.yaml"].Version.Size != 200 {
		t.Fatalf("after IndexEvery: %d lines, rows %v", lines(), idx)
	}
	// Appends that outgrow a quarter of the file (ten rows and a header):
	// appended while they fit, then rewritten whole.
	second, at := inode(), now.Add(IndexEvery)
	appends := 0
	for k := 0; inode() == second; k++ {
		if k == 10 {
			t.Fatalf("still not rewritten after %d rows appended one at a time (%d lines)", k, lines())
		}
		at = at.Add(indexAppendEvery)
		set(k, 400+int64(k))
		c.publishIndex(at)
		if inode() == second {
			appends++
		}
	}
	last := fmt.Sprintf("t-%05d.yaml", appends) // the row set by the publish that rewrote
	if idx := read(); appends < 2 || appends > 3 || lines() != 11 || idx[last].Version.Size != 400+int64(appends) || len(idx) != 10 {
		t.Fatalf("%d rows appended before the rewrite, then %d lines, rows %v", appends, lines(), idx)
	}
}

// TestIndexReadWhileAppended reads the list index over and over while
// another goroutine appends rows and rewrites it (the owner, through
// publishIndex): every read succeeds, and every row read is one that was
// set, of a version that was that file's at some point.
func TestIndexReadWhileAppended(t *testing.T) {
	c, dir, spool, set := publisher(t)
	const files, rounds = 200, 400
	for i := range files {
		set(i, 0)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c.publishIndex(now)
	done, stop := make(chan struct{}), make(chan struct{})
	var reads int
	var readErr error
	go func() {
		defer close(done)
		for reads = 0; readErr == nil && reads < 1e6; reads++ {
			idx, err := ReadIndex(dir, spool)
			if err != nil {
				readErr = err
				return
			}
			for name, row := range idx {
				if v := row.Version.Size; row.Row.Done != v || v < 0 || v >= rounds || name != row.Row.Name+".yaml" {
					readErr = fmt.Errorf("row of %s: version %v, task %s done %d", name, row.Version, row.Row.Name, row.Row.Done)
					return
				}
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	r := rand.New(rand.NewPCG(5, 6))
	for k := 1; k < rounds; k++ {
		for range 1 + r.IntN(20) {
			set(r.IntN(files), int64(k))
		}
		now = now.Add(indexAppendEvery + time.Duration(r.IntN(int(IndexEvery/10))))
		c.publishIndex(now)
	}
	close(stop)
	<-done
	if readErr != nil {
		t.Fatal(readErr)
	}
	if reads < 10 {
		t.Errorf("only %d reads during the appends", reads)
	}
}

// TestVersionAt: the version of a file follows a link, changes with an
// append in place and with a replacement, and a missing name is
// fs.ErrNotExist.
func TestVersionAt(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	at := func(name string) (FileVersion, error) { return VersionAt(int(d.Fd()), name) }
	path := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(path, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := at("t.yaml")
	var st syscall.Stat_t
	if err != nil || syscall.Stat(path, &st) != nil || first.Inode != st.Ino || first.Size != 5 {
		t.Fatalf("version %+v (%v), inode %d", first, err, st.Ino)
	}
	if err := os.Symlink("t.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if v, err := at("link.yaml"); err != nil || v != first {
		t.Errorf("through a link: %+v (%v), want %+v", v, err, first)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("b: 2\n")
	_ = f.Close()
	if v, err := at("t.yaml"); err != nil || v.Inode != first.Inode || v.Size != 10 {
		t.Errorf("after an append: %+v (%v)", v, err)
	}
	if err := os.Rename(path, path+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("a: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := at("t.yaml"); err != nil || v.Inode == first.Inode {
		t.Errorf("a replacement has the first inode: %+v (%v)", v, err)
	}
	if _, err := at("gone.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing name: %v", err)
	}
}

// TestListIndexAppended: a reader that read the list index gets, from
// Appended, the rows appended since (each file's last), then only those
// appended after that; a torn last line waits for its end; once the index
// is rewritten, none.
func TestListIndexAppended(t *testing.T) {
	c, dir, spool, set := publisher(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 10 {
		set(i, 100)
	}
	c.publishIndex(now)
	x, err := ReadListIndex(dir, spool)
	if err != nil || len(x.Rows) != 10 {
		t.Fatalf("read: %d rows, %v", len(x.Rows), err)
	}
	if rows, err := x.Appended(); err != nil || len(rows) != 0 {
		t.Fatalf("nothing appended yet: %v, %v", rows, err)
	}
	version := func(rows map[string]*IndexedTask, i int) int64 {
		if r := rows[fmt.Sprintf("t-%05d.yaml", i)]; r != nil {
			return r.Version.Size
		}
		return -1
	}
	set(3, 200)
	set(7, 200)
	now = now.Add(indexAppendEvery)
	c.publishIndex(now)
	set(3, 300)
	now = now.Add(indexAppendEvery)
	c.publishIndex(now)
	rows, err := x.Appended()
	if err != nil || len(rows) != 2 || version(rows, 3) != 300 || version(rows, 7) != 200 {
		t.Fatalf("after two appends: %v, %v", rows, err)
	}
	if rows, err := x.Appended(); err != nil || len(rows) != 0 {
		t.Fatalf("asked again: %v, %v", rows, err)
	}
	// Half a row (an append under way), then the rest.
	path := filepath.Join(dir, IndexFile)
	set(5, 500)
	row := c.index.rows["t-00005.yaml"]
	appendRaw := func(b []byte) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Write(b)
		_ = f.Close()
	}
	appendRaw(row[:len(row)/2])
	if rows, err := x.Appended(); err != nil || len(rows) != 0 {
		t.Fatalf("a torn row: %v, %v", rows, err)
	}
	appendRaw(row[len(row)/2:])
	if rows, err := x.Appended(); err != nil || len(rows) != 1 || version(rows, 5) != 500 {
		t.Fatalf("the row completed: %v, %v", rows, err)
	}
	// Rewritten whole, larger than what was read: its rows are a new
	// file's, read by a new reader.
	set(9, 900)
	for i := 10; i < 40; i++ {
		set(i, 100)
	}
	c.publishIndex(now.Add(IndexEvery))
	if rows, err := x.Appended(); err != nil || len(rows) != 0 {
		t.Fatalf("after a rewrite: %v, %v", rows, err)
	}
	if y, err := ReadListIndex(dir, spool); err != nil || version(y.Rows, 9) != 900 || version(y.Rows, 3) != 300 {
		t.Fatalf("the rewritten index: %v", err)
	}
}

// TestIndexedRowFollowsTheIndexWhileSet reads the controller's own rows
// (IndexedRow, what a served listing reads) from several goroutines while
// the owner sets, drops and publishes rows: every row read is whole (the
// version it names is the one its task says), a dropped row is gone, and
// once the owner stops each row is the one a reader of the published index
// gets. A row keeps the labels it was set with, whatever becomes of the
// task's map.
func TestIndexedRowFollowsTheIndexWhileSet(t *testing.T) {
	c, dir, spool, set := publisher(t)
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
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for k := 1; k < rounds; k++ {
		i := r.IntN(files)
		if r.IntN(10) == 0 {
			c.index.drop(filepath.Join(spool, name(i)))
			if _, ok := c.IndexedRow(name(i)); ok {
				t.Fatalf("%s still has a row once dropped", name(i))
			}
		} else {
			set(i, int64(k))
		}
		if k%50 == 0 {
			now = now.Add(IndexEvery)
			c.publishIndex(now)
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
	c.publishIndex(now.Add(IndexEvery))
	published, err := ReadIndex(dir, spool)
	if err != nil {
		t.Fatal(err)
	}
	for i := range files {
		own, ok := c.IndexedRow(name(i))
		pub, pubOK := published[name(i)]
		if ok != pubOK || ok && !reflect.DeepEqual(*own, *pub) {
			t.Errorf("%s: own row %+v (%v), published %+v (%v)", name(i), own, ok, pub, pubOK)
		}
	}

	task, err := v1alpha1.ParseManifest("l.yaml", []byte(doneTask))
	if err != nil {
		t.Fatal(err)
	}
	task.Metadata.Labels = map[string]string{"stage": "mesh"}
	c.index.set(filepath.Join(spool, "l.yaml"), task, FileVersion{Inode: 1})
	task.Metadata.Labels["stage"] = "changed"
	if row, ok := c.IndexedRow("l.yaml"); !ok || row.Row.Labels["stage"] != "mesh" {
		t.Errorf("the row's labels follow the task's map: %+v", row)
	}
}
