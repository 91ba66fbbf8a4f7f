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

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/lardon3d/lardon3d-controller/internal/testfill"
	"github.com/lardon3d/lardon3d-controller/internal/testseed"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
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
	types := reconcile.ListedConditions()
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

// listing is what get prints for files with options o (listTasks' steps
// after the read).
func listing(t *testing.T, files []manifestFile, o *getOptions, sel string, now time.Time) string {
	t.Helper()
	s, err := labels.Parse(sel)
	if err != nil {
		t.Fatal(err)
	}
	files = selectLabels(append([]manifestFile(nil), files...), s)
	sortFiles(files, o.sortBy)
	out, err := showFiles(files, o, false, now)
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

// TestListingReadsOnlyTheRow: get's table, wide table, names, sort
// orders and label selection read a task's ListRow alone, so a listing
// from the index's rows prints what one from the parsed files prints.
// (reconcile's TestIndexRowRoundTrip holds a row to what the index gives
// back.)
func TestListingReadsOnlyTheRow(t *testing.T) {
	for _, seed := range testseed.Seeds(t, 1, 2, 3) {
		r := rand.New(rand.NewPCG(seed, 15))
		now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		var full, view []manifestFile
		learned := map[string]*reconcile.ProfileEstimate{}
		for i := 0; i < 60; i++ {
			file := roundTrip(t, randomTask(r, i))
			p := reconcile.ProfileOf(&file.Spec)
			if learned[p] == nil {
				learned[p] = &reconcile.ProfileEstimate{Profile: p, DurationPerItem: time.Duration(1+r.IntN(90)) * time.Second}
			}
			path := filepath.Join("/spool", file.Metadata.Name+".yaml")
			parsed := taskFile(path, file)
			parsed.learned = learned[p]
			full = append(full, parsed)
			row := reconcile.RowOf(file)
			view = append(view, manifestFile{path: path, row: &row, learned: learned[p]})
		}
		for _, o := range listOptions() {
			for _, sel := range []string{"", "app=colmap", "stage!=1,app"} {
				want := listing(t, full, &o, sel, now)
				got := listing(t, view, &o, sel, now)
				if got != want {
					t.Fatalf("seed %d, -o %q --sort-by %s --no-headers=%v -l %q:\nfrom the files:\n%s\nfrom the index:\n%s", seed, o.output, o.sortBy, o.noHeaders, sel, want, got)
				}
			}
		}
	}
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

// TestGetFromTheIndexPrintsWhatTheFilesSay: with a controller running, get
// lists from its index (every valid manifest's row comes from it) and
// prints what reading every manifest prints, invalid, unparseable and
// waiting tasks included; once the controller is gone the index is not
// used.
func TestGetFromTheIndexPrintsWhatTheFilesSay(t *testing.T) {
	spool := newSpool(t)
	writeVariedSpool(t, spool)
	c := startController(t, spool)
	stateDir := filepath.Join(spool, ".lardon3d")
	var idx map[string]*reconcile.IndexedTask
	eventually(t, time.Minute, "every valid task Done and in the index", func() bool {
		var err error
		idx, err = reconcile.ReadIndex(stateDir, spool)
		if err != nil {
			return false
		}
		for i := 0; i < 12; i++ {
			if row := idx[fmt.Sprintf("t%02d.yaml", i)]; row == nil || row.Row.Phase != v1alpha1.PhaseDone {
				return false
			}
		}
		return idx["waits.yaml"] != nil && idx["paused.yaml"] != nil
	})
	if idx["broken.yaml"] != nil {
		t.Errorf("the unparseable manifest has a row in the index")
	}
	now := time.Now()
	// The files settle (the waiting task's status is written at most
	// every ProgressInterval; the index follows within a publish).
	eventually(t, 20*time.Second, "the listing from the index equal to the files'", func() bool {
		fromIndex, fromFiles := bothListings(t, spool)
		if len(fromIndex) != len(fromFiles) {
			t.Fatalf("%d files listed from the index, %d read", len(fromIndex), len(fromFiles))
		}
		for _, o := range listOptions() {
			for _, sel := range []string{"", "n=1"} {
				if o.output == "wide" {
					continue // ETA: the same learned map for both, tested above
				}
				a, b := listing(t, fromIndex, &o, sel, now), listing(t, fromFiles, &o, sel, now)
				if a != b {
					t.Logf("-o %q --sort-by %s -l %q:\nfrom the files:\n%s\nfrom the index:\n%s", o.output, o.sortBy, sel, b, a)
					return false
				}
			}
		}
		return true
	})
	// The rows stand for the files as they are now.
	if idx, err := reconcile.ReadIndex(stateDir, spool); err != nil {
		t.Fatal(err)
	} else if hits := indexHits(t, spool, idx); hits < 14 {
		t.Errorf("%d of the 14 valid manifests listed from the index", hits)
	}
	// A file changed since its row (the controller stopped, so that it
	// cannot catch up) is read, not taken from the index.
	freezeController(t, c)
	writeManifest(t, spool, "t03.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: t03\n  labels: {n: edited}\nspec:\n  command: [\"true\"]\n  items: {count: 2}\n")
	fromIndex, fromFiles := bothListings(t, spool)
	o := getOptions{output: "wide", sortBy: "name"}
	if a, b := listing(t, fromIndex, &o, "n=edited", now), listing(t, fromFiles, &o, "n=edited", now); a != b || !strings.Contains(a, "t03") {
		t.Errorf("an edited manifest listed from a stale row:\nfrom the files:\n%s\nfrom the index:\n%s", b, a)
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, "get", "--spool", spool)
	if code != 0 || !strings.Contains(out, "broken") || !strings.Contains(out, "Invalid") || !strings.Contains(out, "Rejected") || !strings.Contains(out, "t11") {
		t.Errorf("get (exit %d):\n%s", code, out)
	}
	// The controller gone (killed: no clean-up), its index is refused.
	_ = c.cmd.Process.Kill()
	<-c.done
	if _, err := os.Stat(filepath.Join(stateDir, reconcile.IndexFile)); err != nil {
		t.Fatalf("the killed controller's index: %v", err)
	}
	if _, err := reconcile.ReadIndex(stateDir, spool); err == nil {
		t.Fatalf("the index of a dead controller is taken")
	}
}

// bothListings lists spool from the running controller's index (new
// manifests by file name when many) and from the files alone.
func bothListings(t *testing.T, spool string) (fromIndex, fromFiles []manifestFile) {
	t.Helper()
	fromIndex, err := readSpoolListed(spool, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if fromFiles, err = readSpool(spool); err != nil {
		t.Fatal(err)
	}
	return fromIndex, fromFiles
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

// indexHits counts the manifests of spool whose row in idx is of the
// version the file is now.
func indexHits(t *testing.T, spool string, idx map[string]*reconcile.IndexedTask) int {
	t.Helper()
	n := 0
	for name, row := range idx {
		if v, err := reconcile.VersionOf(filepath.Join(spool, name)); err == nil && v == row.Version {
			n++
		}
	}
	return n
}

// TestGetListsAFloodOfNewManifestsByFileName drops more new manifests than
// a listing parses (unparsedNew) into the spool of a controller that cannot
// read them (stopped): they are listed by file name, New, NotRead, but for
// the one that holds a status; a listing that shows or selects by their
// spec parses them all; once few are new, and once the controller has read
// them, the listing is the files' again.
func TestGetListsAFloodOfNewManifestsByFileName(t *testing.T) {
	spool := newSpool(t)
	const body = "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: %s\n  labels: {wave: %q}\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n"
	writeManifest(t, spool, "first.yaml", fmt.Sprintf(body, "first", "0"))
	c := startController(t, spool)
	stateDir := filepath.Join(spool, ".lardon3d")
	eventually(t, time.Minute, "the first task Done in the index", func() bool {
		idx, err := reconcile.ReadIndex(stateDir, spool)
		return err == nil && idx["first.yaml"] != nil && idx["first.yaml"].Row.Phase == v1alpha1.PhaseDone && indexHits(t, spool, idx) == 1
	})
	done, err := os.ReadFile(filepath.Join(spool, "first.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	freezeController(t, c)
	defer func() { _ = c.cmd.Process.Signal(syscall.SIGCONT) }()
	n := unparsedNew + 20
	for i := range n {
		// metadata.name is not the file's name: a parse would list it so.
		writeManifest(t, spool, fmt.Sprintf("f%03d.yaml", i), fmt.Sprintf(body, fmt.Sprintf("flood-%03d", i), "1"))
	}
	writeManifest(t, spool, "copied.yaml", strings.Replace(string(done), "name: first", "name: copied", 1))
	out, code := runCLI(t, "get", "--spool", spool)
	if code != 0 {
		t.Fatalf("get (exit %d):\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != n+3 {
		t.Fatalf("%d lines for %d manifests:\n%s", len(lines), n+2, out)
	}
	notRead := 0
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		switch {
		case f[0] == "first" || f[0] == "copied":
			if f[1] != "Done" {
				t.Errorf("a manifest with a status listed as %q: %s", f[1], l)
			}
		case strings.HasPrefix(f[0], "f") && len(f) == 7 && f[1] == "New" && f[6] == "NotRead":
			notRead++
		default:
			t.Errorf("unexpected row %q", l)
		}
	}
	if notRead != n {
		t.Errorf("%d of the %d new manifests listed by file name", notRead, n)
	}
	if out, _ := runCLI(t, "get", "--spool", spool, "-o", "name"); !strings.Contains(out, "task/f007\n") || strings.Contains(out, "flood-007") {
		t.Errorf("get -o name in a flood:\n%s", out)
	}
	// What shows or selects by the spec parses every manifest.
	for _, args := range [][]string{{"-l", "wave=1"}, {"-o", "wide"}, {"flood-007"}} {
		out, code := runCLI(t, append([]string{"get", "--spool", spool}, args...)...)
		if code != 0 || !strings.Contains(out, "flood-007") || strings.Contains(out, "NotRead") {
			t.Errorf("get %v (exit %d): the specs not read:\n%s", args, code, out)
		}
	}
	// Few new manifests: all parsed, the listing is the files'.
	for i := unparsedNew - 10; i < n; i++ {
		if err := os.Remove(filepath.Join(spool, fmt.Sprintf("f%03d.yaml", i))); err != nil {
			t.Fatal(err)
		}
	}
	sameAsFiles := func() bool {
		fromIndex, fromFiles := bothListings(t, spool)
		o := getOptions{}
		a, b := listing(t, fromIndex, &o, "", time.Now()), listing(t, fromFiles, &o, "", time.Now())
		if a != b {
			t.Logf("from the files:\n%s\nfrom the index:\n%s", b, a)
		}
		return a == b && !strings.Contains(a, "NotRead")
	}
	if !sameAsFiles() {
		t.Errorf("%d new manifests not listed as the files are", unparsedNew-10)
	}
	// The flood again; once the controller has read it, no row is NotRead.
	for i := unparsedNew - 10; i < n; i++ {
		writeManifest(t, spool, fmt.Sprintf("f%03d.yaml", i), fmt.Sprintf(body, fmt.Sprintf("flood-%03d", i), "1"))
	}
	if out, _ := runCLI(t, "get", "--spool", spool); !strings.Contains(out, "NotRead") {
		t.Errorf("the flood again, not listed by file name:\n%s", out)
	}
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the listing from the index equal to the files'", sameAsFiles)
}

// TestSortFilesIsTheStableSortsItReplaced holds sortFiles, one sort on
// keys computed once, to the order get used to print: the files by name
// (then path), stable-sorted by queue position (the never queued last),
// then stable-sorted by the --sort-by key; on random files with ties in
// every key, unparseable ones among them.
func TestSortFilesIsTheStableSortsItReplaced(t *testing.T) {
	queueLess := func(a, b manifestFile) bool {
		qa, qb := queueSeq(a), queueSeq(b)
		if (qa == 0) != (qb == 0) {
			return qb == 0
		}
		return qa < qb
	}
	startLess := func(a, b manifestFile) bool {
		var ta, tb *time.Time
		if a.task != nil && a.task.Status.StartTime != nil {
			ta = &a.task.Status.StartTime.Time
		}
		if b.task != nil && b.task.Status.StartTime != nil {
			tb = &b.task.Status.StartTime.Time
		}
		if (ta == nil) != (tb == nil) {
			return tb == nil
		}
		return ta != nil && ta.Before(*tb)
	}
	reference := func(files []manifestFile, by string) {
		sortByName(files)
		sort.SliceStable(files, func(i, j int) bool { return queueLess(files[i], files[j]) })
		switch by {
		case "name":
			sort.SliceStable(files, func(i, j int) bool { return files[i].name() < files[j].name() })
		case "age":
			sort.SliceStable(files, func(i, j int) bool { return startLess(files[i], files[j]) })
		case "phase":
			sort.SliceStable(files, func(i, j int) bool { return phaseName(files[i]) < phaseName(files[j]) })
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	phases := []v1alpha1.Phase{"", v1alpha1.PhasePending, v1alpha1.PhaseRunning, v1alpha1.PhaseDone}
	for round := range 200 {
		files := make([]manifestFile, r.IntN(40))
		for i := range files {
			path := fmt.Sprintf("/spool/f%d.yaml", r.IntN(1000)*100+i) // distinct, as in a directory
			if r.IntN(8) == 0 {
				files[i] = manifestFile{path: path, err: errors.New("unparseable")}
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
			files[i].notRead = r.IntN(5) == 0
		}
		for _, by := range []string{"", "queue", "name", "age", "phase"} {
			got, want := slices.Clone(files), slices.Clone(files)
			slices.Reverse(got) // any order in
			sortFiles(got, by)
			reference(want, by)
			for i := range got {
				if got[i].path != want[i].path || got[i].row != want[i].row || got[i].err != want[i].err {
					t.Fatalf("round %d, --sort-by %q: file %d is %s (%v), want %s (%v)", round, by, i, got[i].path, got[i].name(), want[i].path, want[i].name())
				}
			}
		}
	}
}

// BenchmarkGetListing is get's table of 10,000 tasks while a controller
// runs, in one run so that the cases compare: "indexed", every task Done
// and in the controller's index; "flood", 10,000 manifests just dropped
// into the spool of a controller that has not read them (stopped), listed
// by file name; "flood-parsed", the same files parsed as without a
// controller (readSpool), what get did before. The manifests come from
// the bench's own generator (bench/benchkit spool-gen).
func BenchmarkGetListing(b *testing.B) {
	const n = 10000
	gen := func(b *testing.B, kind, dir string) {
		b.Helper()
		out, err := exec.Command("go", "run", "../../bench/benchkit", "spool-gen", "--kind", kind, "--n", fmt.Sprint(n), "--dir", dir).CombinedOutput()
		if err != nil {
			b.Fatalf("spool-gen: %v\n%s", err, out)
		}
	}
	list := func(b *testing.B, spool string, read func(string) ([]manifestFile, error)) {
		b.Helper()
		o := &getOptions{}
		for b.Loop() {
			files, err := read(spool)
			if err != nil || len(files) != n {
				b.Fatalf("%d files listed: %v", len(files), err)
			}
			sortFiles(files, "")
			if _, err := showFiles(files, o, false, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	}
	listed := func(spool string) ([]manifestFile, error) { return readSpoolListed(spool, nil, true) }
	b.Run("indexed", func(b *testing.B) {
		spool := newSpool(b)
		gen(b, "done", spool)
		startController(b, spool)
		eventually(b, 2*time.Minute, "every task in the index", func() bool {
			idx, err := reconcile.ReadIndex(filepath.Join(spool, ".lardon3d"), spool)
			return err == nil && len(idx) == n
		})
		list(b, spool, listed)
	})
	spool := newSpool(b)
	c := startController(b, spool)
	eventually(b, time.Minute, "the empty index", func() bool {
		_, err := reconcile.ReadIndex(filepath.Join(spool, ".lardon3d"), spool)
		return err == nil
	})
	freezeController(b, c)
	defer func() { _ = c.cmd.Process.Signal(syscall.SIGCONT) }()
	gen(b, "trivial", spool)
	b.Run("flood", func(b *testing.B) { list(b, spool, listed) })
	b.Run("flood-parsed", func(b *testing.B) { list(b, spool, readSpool) })
}
