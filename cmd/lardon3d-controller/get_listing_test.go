package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/internal/testfill"
	"github.com/lardon3d/lardon3d-controller/internal/testseed"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// randomTask is a task with every field get could read set at random
// (pointers sometimes nil, conditions of every type in random order and
// states, repeated types included).
func randomTask(r *rand.Rand, i int) *v1alpha1.Task {
	ts := func() *metav1.Time {
		if r.IntN(4) == 0 {
			return nil
		}
		t := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(7200)) * time.Second))
		return &t
	}
	q := func() resource.Quantity { return *resource.NewQuantity(r.Int64N(1<<34), resource.BinarySI) }
	phases := []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseReserved, v1alpha1.PhaseRunning, v1alpha1.PhasePaused, v1alpha1.PhaseDone, v1alpha1.PhaseFailed, v1alpha1.PhaseRejected}
	t := &v1alpha1.Task{}
	// Every field set first: a field get comes to read beside the row
	// then shows here.
	testfill.Fill(t)
	t.APIVersion, t.Kind = "lardon3d.io/v1alpha1", "Task"
	t.Metadata.Name = fmt.Sprintf("task-%03d", i)
	t.Metadata.Labels = nil
	if r.IntN(2) == 0 {
		t.Metadata.Labels = map[string]string{"app": []string{"colmap", "meshroom"}[r.IntN(2)], "stage": fmt.Sprint(r.IntN(3))}
	}
	t.Metadata.Annotations = map[string]string{"note": "not listed"}
	t.Spec.Class = []v1alpha1.TaskClass{"", v1alpha1.ClassThumbnails, v1alpha1.ClassExif}[r.IntN(3)]
	t.Spec.Command = [][]string{{"/bin/true"}, {"sh", "-c", fmt.Sprintf("echo %d", r.IntN(3))}, {"python3", "x.py"}}[r.IntN(3)]
	t.Spec.Resources.Profile = ""
	if r.IntN(3) == 0 {
		t.Spec.Resources.Profile = "p" + fmt.Sprint(r.IntN(2))
	}
	t.Spec.Env = []v1alpha1.EnvVar{{Name: "A", Value: "b"}}
	t.Spec.Items.Files = []string{"a.jpg", "b.jpg"}
	t.Spec.DependsOn = []string{"other"}
	st := &t.Status
	st.Phase = phases[r.IntN(len(phases))]
	st.ObservedGeneration = r.Int64N(3)
	st.SpecHash = "abcdef0123456789"
	st.QueueSeq = r.Int64N(5) // ties and 0 (never queued)
	st.Progress = v1alpha1.Progress{ItemsDone: r.Int64N(10), ItemsTotal: r.Int64N(12), BatchesDone: r.Int64N(3), InputsHash: "0011"}
	st.Reservation, st.LastBatch = nil, nil
	if r.IntN(2) == 0 {
		gpu := q()
		st.Reservation = &v1alpha1.Contract{Batch: r.Int64N(9), BatchRequested: r.Int64N(9), Threads: int32(r.IntN(8)), Memory: q(), GPUMemory: &gpu, GrantedAt: metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))}
	}
	if r.IntN(2) == 0 {
		st.LastBatch = &v1alpha1.BatchRecord{Index: r.Int64N(9), Start: r.Int64N(9), Size: r.Int64N(9), Threads: 2, StartTime: ts()}
		if r.IntN(2) == 0 {
			p := q()
			st.LastBatch.PeakMemory = &p
		}
		if r.IntN(2) == 0 {
			st.LastBatch.EndTime = ts()
		}
		if r.IntN(2) == 0 {
			n := r.Int64N(10)
			st.LastBatch.ItemsReported = &n
		}
		if r.IntN(4) == 0 {
			st.LastBatch.StartTime = nil
		}
	}
	st.StartTime, st.CompletionTime = ts(), ts()
	st.LogFile = "/x/" + t.Metadata.Name + ".log"
	st.Conditions = nil
	types := listing.ListedConditions()
	types = append(types, "Rerun", "Other")
	for n := r.IntN(8); n > 0; n-- {
		status := []metav1.ConditionStatus{"True", "False", "Unknown"}[r.IntN(3)]
		st.Conditions = append(st.Conditions, metav1.Condition{
			Type: types[r.IntN(len(types))], Status: status, Reason: fmt.Sprintf("R%d", r.IntN(5)),
			Message: "a message get's table never shows", LastTransitionTime: metav1.NewTime(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)),
		})
	}
	return t
}

// roundTrip is t as a reader of its JSON form gets it (times to the
// second, as in a manifest, quantities canonical).
func roundTrip(t *testing.T, task *v1alpha1.Task) *v1alpha1.Task {
	t.Helper()
	data, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	var out v1alpha1.Task
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// listingOf is what get prints for l with options o and selector sel
// (listTasks' steps after the read).
func listingOf(t *testing.T, l listed, o *getOptions, sel string, now time.Time) string {
	t.Helper()
	s, err := labels.Parse(sel)
	if err != nil {
		t.Fatal(err)
	}
	l.files = listing.SelectLabels(slices.Clone(l.files), s)
	sortFiles(l.files, o.sortBy)
	out, err := showFiles(&tablePrinter{padding: 3}, l, o, false, now)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listOptions are every output get may take from the index, in every
// order, with and without headers.
func listOptions() []getOptions {
	var out []getOptions
	for _, output := range []string{"", "wide", "name"} {
		for _, sortBy := range []string{"queue", "name", "age", "phase"} {
			for _, noHeaders := range []bool{false, true} {
				out = append(out, getOptions{output: output, sortBy: sortBy, noHeaders: noHeaders})
			}
		}
	}
	return out
}

// writeVariedSpool writes into spool twelve tasks t00..t11 (labels n=0..2,
// one to four items each), one waiting for a dependency that does not
// exist (waits), one paused, one invalid and one not parseable (broken).
func writeVariedSpool(t *testing.T, spool string) {
	t.Helper()
	for i := 0; i < 12; i++ {
		writeManifest(t, spool, fmt.Sprintf("t%02d.yaml", i), fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  name: t%02d
  labels: {n: "%d"}
spec:
  command: ["true"]
  items: {count: %d}
`, i, i%3, 1+i%4))
	}
	writeManifest(t, spool, "waits.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n  dependsOn: [nobody]\n")
	writeManifest(t, spool, "paused.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n  paused: true\n")
	writeManifest(t, spool, "invalid.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [true]\n  items: {count: 2}\n  resources:\n    batch: {min: 1, max: 0}\n")
	writeManifest(t, spool, "broken.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec: [unclosed\n")
}

// freezeController stops c (SIGSTOP) and waits until every thread of it is
// stopped: kill(2) returns before a thread running on another CPU, or in a
// system call, has stopped, and on a loaded machine such a thread read the
// event of a manifest written after the signal.
func freezeController(t testing.TB, c *controller) {
	t.Helper()
	pid := c.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every thread of the controller stopped", func() bool {
		threads, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return false
		}
		for _, th := range threads {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, th.Name()))
			// The state is the field after the command's closing parenthesis.
			i := strings.LastIndexByte(string(stat), ')')
			if err != nil || i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
				return false
			}
		}
		return true
	})
}

// TestSortFilesIsTheStableSortsItReplaced holds sortFiles, one sort on
// keys computed once, to the order get used to print: the files by name
// (then path), stable-sorted by queue position (the never queued last),
// then stable-sorted by the --sort-by key; on random files with ties in
// every key, unparseable ones among them.
func TestSortFilesIsTheStableSortsItReplaced(t *testing.T) {
	queueLess := func(a, b listing.File) bool {
		qa, qb := queueSeq(a), queueSeq(b)
		if (qa == 0) != (qb == 0) {
			return qb == 0
		}
		return qa < qb
	}
	startLess := func(a, b listing.File) bool {
		var ta, tb *time.Time
		if a.Task != nil && a.Task.Status.StartTime != nil {
			ta = &a.Task.Status.StartTime.Time
		}
		if b.Task != nil && b.Task.Status.StartTime != nil {
			tb = &b.Task.Status.StartTime.Time
		}
		if (ta == nil) != (tb == nil) {
			return tb == nil
		}
		return ta != nil && ta.Before(*tb)
	}
	reference := func(files []listing.File, by string) {
		listing.SortByName(files)
		sort.SliceStable(files, func(i, j int) bool { return queueLess(files[i], files[j]) })
		switch by {
		case "name":
			sort.SliceStable(files, func(i, j int) bool { return files[i].Name() < files[j].Name() })
		case "age":
			sort.SliceStable(files, func(i, j int) bool { return startLess(files[i], files[j]) })
		case "phase":
			order := map[string]int{"New": 0, "Pending": 1, "Reserved": 2, "Running": 3, "Paused": 4, "Done": 5, "Failed": 6, "Rejected": 7, "Invalid": 8}
			sort.SliceStable(files, func(i, j int) bool { return order[files[i].Phase()] < order[files[j].Phase()] })
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	phases := []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseRunning, v1alpha1.PhaseDone}
	for round := range 200 {
		files := make([]listing.File, r.IntN(40))
		for i := range files {
			path := fmt.Sprintf("/spool/f%d.yaml", r.IntN(1000)*100+i) // distinct, as in a directory
			if r.IntN(8) == 0 {
				files[i] = listing.File{Path: path, Err: errors.New("unparseable")}
				continue
			}
			task := &v1alpha1.Task{}
			if r.IntN(3) > 0 {
				task.Metadata.Name = fmt.Sprintf("t%d", r.IntN(6))
			}
			task.Status.Phase = phases[r.IntN(len(phases))]
			task.Status.QueueSeq = r.Int64N(4)
			if r.IntN(2) == 0 {
				s := metav1.Unix(int64(r.IntN(3)), 0)
				task.Status.StartTime = &s
			}
			files[i] = taskFile(path, task)
			files[i].NotRead = r.IntN(5) == 0
		}
		for _, by := range []string{"", "queue", "name", "age", "phase"} {
			got, want := slices.Clone(files), slices.Clone(files)
			slices.Reverse(got) // any order in
			sortFiles(got, by)
			reference(want, by)
			for i := range got {
				if got[i].Path != want[i].Path || got[i].Row != want[i].Row || got[i].Err != want[i].Err {
					t.Fatalf("round %d, --sort-by %q: file %d is %s (%v), want %s (%v)", round, by, i, got[i].Path, got[i].Name(), want[i].Path, want[i].Name())
				}
			}
		}
	}
}

// versionedRows are a controller's rows (listing.Rows) of files as a
// test made them.
type versionedRows map[string]*listing.VersionedRow

func (r versionedRows) IndexedRow(base string) (*listing.VersionedRow, bool) {
	row, ok := r[base]
	return row, ok
}

// rowsOf are the rows a controller that read every valid manifest of
// files holds.
func rowsOf(t testing.TB, files []listing.File) versionedRows {
	t.Helper()
	rows := versionedRows{}
	for _, f := range files {
		if f.Task == nil || f.Err != nil {
			continue
		}
		v, err := listing.VersionOf(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		rows[filepath.Base(f.Path)] = &listing.VersionedRow{Version: v, Row: *f.Row}
	}
	return rows
}

// serveSpool serves listings of spool from rows (nil: every manifest
// parsed), on the socket of stateDir, until the test ends.
func serveSpool(t testing.TB, spool, stateDir string, rows listing.Rows) {
	t.Helper()
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(spool)
	if err != nil {
		t.Fatal(err)
	}
	s, err := listing.Serve(stateDir, spoolAt(abs), rows, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
}

// TestServedListingPrintsWhatTheFilesSay: get's table, wide table, names,
// sort orders and label selection of what a controller serves (rows, no
// task; from its rows, or from the files it parsed) print what get prints
// reading the files itself, for random tasks with every field set.
func TestServedListingPrintsWhatTheFilesSay(t *testing.T) {
	for _, seed := range testseed.Seeds(t, 1, 2, 3) {
		r := rand.New(rand.NewPCG(seed, 15))
		now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		spool := newSpool(t)
		for i := 0; i < 60; i++ {
			data, err := yaml.Marshal(roundTrip(t, randomTask(r, i)))
			if err != nil {
				t.Fatal(err)
			}
			writeManifest(t, spool, fmt.Sprintf("task-%03d.yaml", i), string(data))
		}
		files, err := readSpool(spool)
		if err != nil {
			t.Fatal(err)
		}
		learned := map[string]*reconcile.ProfileEstimate{}
		for _, f := range files {
			if f.Row != nil && learned[f.Row.Profile] == nil {
				learned[f.Row.Profile] = &reconcile.ProfileEstimate{Profile: f.Row.Profile, DurationPerItem: time.Duration(1+r.IntN(90)) * time.Second}
			}
		}
		fromFiles := listed{files: files, learned: learned}
		for _, rows := range []listing.Rows{nil, rowsOf(t, files)} {
			stateDir := filepath.Join(t.TempDir(), "state")
			serveSpool(t, spool, stateDir, rows)
			servedFiles, ok := listing.Ask(stateDir, spool, listing.Query{})
			if !ok || len(servedFiles) != len(files) {
				t.Fatalf("seed %d: %d files served (%v), %d read", seed, len(servedFiles), ok, len(files))
			}
			served := listed{files: servedFiles, learned: learned}
			for _, o := range listOptions() {
				for _, sel := range []string{"", "app=colmap", "stage!=1,app"} {
					want := listingOf(t, fromFiles, &o, sel, now)
					got := listingOf(t, served, &o, sel, now)
					if got != want {
						t.Fatalf("seed %d, rows %v, -o %q --sort-by %s --no-headers=%v -l %q:\nfrom the files:\n%s\nserved:\n%s", seed, rows != nil, o.output, o.sortBy, o.noHeaders, sel, want, got)
					}
				}
			}
		}
	}
}

// TestGetEscapesWhatTheControllerSends: the rows a controller sends are
// printed as get's own are, control characters escaped.
func TestGetEscapesWhatTheControllerSends(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "t1.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n")
	v, err := listing.VersionOf(path)
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(t.TempDir(), "state")
	serveSpool(t, spool, stateDir, versionedRows{"t1.yaml": {Version: v, Row: listing.Row{Name: "t1\x1b]0;owned\x07", Phase: "Done\x1b[2J"}}})
	out, code := runCLI(t, "get", "--spool", spool, "--state-dir", stateDir)
	if code != 0 || !strings.Contains(out, "t1") || strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("get (exit %d) printed %q", code, out)
	}
}

// BenchmarkGetListing is get's table of 10,000 tasks while a controller
// runs, in one run so that the cases compare: "served", every task Done
// and listed by the controller; "flood", 10,000 manifests just dropped
// into the spool of a controller that has not read them (a server with no
// rows), listed by file name; "flood-parsed", the same files parsed as
// without a controller (readSpool). The manifests come from the bench's
// own generator (bench/benchkit spool-gen).
func BenchmarkGetListing(b *testing.B) {
	const n = 10000
	gen := func(b *testing.B, kind, dir string) {
		b.Helper()
		out, err := exec.Command("go", "run", "../../bench/benchkit", "spool-gen", "--kind", kind, "--n", fmt.Sprint(n), "--dir", dir).CombinedOutput()
		if err != nil {
			b.Fatalf("spool-gen: %v\n%s", err, out)
		}
	}
	list := func(b *testing.B, spool, stateDir string) {
		b.Helper()
		o := &getOptions{}
		for b.Loop() {
			l, err := listTasks(spool, stateDir, nil, labels.Everything(), o)
			if err != nil || len(l.files) != n {
				b.Fatalf("%d files listed: %v", len(l.files), err)
			}
			if _, err := showFiles(&tablePrinter{padding: 3}, l, o, false, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("served", func(b *testing.B) {
		spool := newSpool(b)
		gen(b, "done", spool)
		c := startController(b, spool)
		stateDir := filepath.Join(spool, ".lardon3d")
		// Its rows: every manifest read once the spool is listed.
		eventually(b, 2*time.Minute, "the spool listed", func() bool { return strings.Contains(c.stderr.String(), `"spool listed"`) })
		eventually(b, 2*time.Minute, "every task listed by the controller", func() bool {
			files, ok := listing.Ask(stateDir, spool, listing.Query{})
			if !ok || len(files) != n {
				return false
			}
			for _, f := range files {
				if f.Phase() != string(v1alpha1.PhaseDone) {
					return false
				}
			}
			return true
		})
		list(b, spool, stateDir)
	})
	spool := newSpool(b)
	gen(b, "trivial", spool)
	stateDir := filepath.Join(b.TempDir(), "state")
	serveSpool(b, spool, stateDir, versionedRows{})
	b.Run("flood", func(b *testing.B) { list(b, spool, stateDir) })
	b.Run("flood-parsed", func(b *testing.B) { list(b, spool, filepath.Join(b.TempDir(), "none")) })
}
