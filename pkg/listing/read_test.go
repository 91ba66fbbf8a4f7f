package listing

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// mapRows are rows held in a map, as a controller holds its own.
type mapRows struct {
	mu sync.Mutex
	m  map[string]*VersionedRow
}

func (r *mapRows) IndexedRow(base string) (*VersionedRow, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.m[base]
	return row, ok
}

// testSpool is a spool whose tasks' profile is their class.
func testSpool(dir string) Spool {
	return Spool{Dir: dir, Profile: func(s *v1alpha1.TaskSpec) string { return "p/" + string(s.Class) }}
}

// task is a manifest of a task called name, with status block status
// ("" for none).
func task(name, status string) string {
	m := fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: %s\n  labels: {app: x}\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n", name)
	if status != "" {
		m += "status:\n" + status
	}
	return m
}

func write(t testing.TB, dir, file, body string) string {
	t.Helper()
	path := filepath.Join(dir, file)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// byName maps files by base name.
func byName(files []File) map[string]File {
	out := map[string]File{}
	for _, f := range files {
		out[filepath.Base(f.Path)] = f
	}
	return out
}

// TestReadListedTakesTheRowsOfTheFilesVersions: a manifest with a row of
// the version the file is, is listed from the row (not parsed); one edited
// since its row, one with no row, an invalid one and an unparseable one
// are read and parsed as Read reads them; with no rows, it is Read.
func TestReadListedTakesTheRowsOfTheFilesVersions(t *testing.T) {
	dir := t.TempDir()
	sp := testSpool(dir)
	rows := &mapRows{m: map[string]*VersionedRow{}}
	for _, n := range []string{"kept", "edited"} {
		path := write(t, dir, n+".yaml", task(n, ""))
		v, err := VersionOf(path)
		if err != nil {
			t.Fatal(err)
		}
		// The row says Running with 7 done: what no file says.
		rows.m[n+".yaml"] = &VersionedRow{Version: v, Row: Row{Name: n, Phase: v1alpha1.PhaseRunning, Done: 7}}
	}
	write(t, dir, "edited.yaml", task("edited", "")+"# longer now\n")
	write(t, dir, "new.yaml", task("new", ""))
	write(t, dir, "invalid.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [true]\n  items: {count: 2}\n  resources:\n    batch: {min: 1, max: 0}\n")
	write(t, dir, "broken.yaml", "kind: [\n")
	files, err := sp.ReadListed(rows, true)
	if err != nil {
		t.Fatal(err)
	}
	got := byName(files)
	if len(files) != 5 {
		t.Fatalf("%d files: %+v", len(files), files)
	}
	if f := got["kept.yaml"]; f.Task != nil || f.Row == nil || f.Row.Done != 7 {
		t.Errorf("the manifest of its row's version was not taken from it: %+v", f)
	}
	if f := got["edited.yaml"]; f.Task == nil || f.Row.Done != 0 || f.Row.Profile != "p/"+string(f.Task.Spec.Class) {
		t.Errorf("a manifest edited since its row was not read: %+v", f)
	}
	if f := got["new.yaml"]; f.Task == nil || f.NotRead || f.Row.Labels["app"] != "x" {
		t.Errorf("a new manifest (few of them) was not parsed: %+v", f)
	}
	if f := got["invalid.yaml"]; f.Phase() != PhaseInvalid || f.Err == nil {
		t.Errorf("the invalid manifest: %+v", f)
	}
	if f := got["broken.yaml"]; !f.Unparseable() || f.Phase() != PhaseInvalid {
		t.Errorf("the unparseable manifest: %+v", f)
	}
	// No rows: every file parsed, as Read does.
	all, err := sp.ReadListed(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if f := byName(all)["kept.yaml"]; len(all) != 5 || f.Task == nil || f.Row.Phase != "" {
		t.Errorf("without rows: %+v", all)
	}
	if _, err := testSpool(filepath.Join(dir, "nosuch")).ReadListed(rows, true); err == nil {
		t.Errorf("a spool that does not exist listed")
	}
}

// TestReadListedListsAFloodByFileName: more new manifests than UnparsedNew
// (none with a row, none with a status) are listed by file name, New,
// NotRead; one that holds a status is parsed whatever their number; when
// byName does not allow it, or few are new, every one is parsed.
func TestReadListedListsAFloodByFileName(t *testing.T) {
	dir := t.TempDir()
	sp := testSpool(dir)
	rows := &mapRows{m: map[string]*VersionedRow{}}
	n := UnparsedNew + 20
	for i := range n {
		// metadata.name is not the file's name: a parse would list it so.
		write(t, dir, fmt.Sprintf("f%03d.yaml", i), task(fmt.Sprintf("flood-%03d", i), ""))
	}
	write(t, dir, "done.yaml", task("done", "  phase: Done\n"))
	files, err := sp.ReadListed(rows, true)
	if err != nil {
		t.Fatal(err)
	}
	notRead := 0
	for _, f := range files {
		switch {
		case f.Name() == "done":
			if f.Phase() != "Done" || f.NotRead {
				t.Errorf("the manifest holding a status: %+v", f)
			}
		case f.NotRead && f.Phase() == PhaseNew && f.Reason() == ReasonNotRead && f.Name() == v1alpha1.NameFromFile(filepath.Base(f.Path)):
			notRead++
		default:
			t.Errorf("unexpected file %+v", f)
		}
	}
	if notRead != n {
		t.Errorf("%d of the %d new manifests listed by file name", notRead, n)
	}
	files, err = sp.ReadListed(rows, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.NotRead || f.Task == nil {
			t.Fatalf("listed by name when byName is false: %+v", f)
		}
	}
	for i := UnparsedNew - 10; i < n; i++ {
		if err := os.Remove(filepath.Join(dir, fmt.Sprintf("f%03d.yaml", i))); err != nil {
			t.Fatal(err)
		}
	}
	files, err = sp.ReadListed(rows, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.NotRead || f.Task == nil {
			t.Fatalf("%d new manifests, one listed by name: %+v", UnparsedNew-10, f)
		}
	}
}
