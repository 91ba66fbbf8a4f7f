package listing

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/lardon3d/lardon3d-controller/internal/testseed"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestFileLineRoundTrip: any file of a listing, its row's strings and its
// error with tabs, newlines, quotes and any bytes included, parses back
// from its line as it was written (its error as a message).
func TestFileLineRoundTrip(t *testing.T) {
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
			f := File{Path: "/spool/f" + []string{"", "\t", "\"", "é"}[r.IntN(4)] + ".yaml"}
			if r.IntN(3) == 0 {
				f.Err = errors.New("e" + str())
			}
			if r.IntN(4) > 0 {
				row := Row{Name: str(), Profile: str(), Phase: v1alpha1.Phase(str()), Gen: r.Int64(), Seq: -r.Int64N(5), Done: r.Int64N(9), Total: r.Int64N(9)}
				if r.IntN(2) == 0 {
					row.Reservation = &Contract{Batch: num(), BatchRequested: num(), Threads: num(), Memory: num()}
				}
				if r.IntN(2) == 0 {
					row.LastBatch = &Batch{Index: num(), PeakMemory: num(), Size: num(), Start: num(), End: num(), ItemsReported: num(), Paused: num()}
				}
				if r.IntN(2) == 0 {
					s := num()
					row.Start = &s
				}
				if r.IntN(2) == 0 {
					c := num()
					row.Created = &c
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
				f.Row = &row
				f.NotRead = r.IntN(4) == 0
			}
			line := appendFile(nil, &f)
			if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
				t.Fatalf("seed %d: line %q is not one line", seed, line)
			}
			got, err := parseFile("/spool/", string(line[:len(line)-1]))
			if err != nil || got.Path != f.Path || !reflect.DeepEqual(got.Row, f.Row) || got.NotRead != f.NotRead || (got.Err == nil) != (f.Err == nil) || got.Err != nil && got.Err.Error() != f.Err.Error() {
				t.Fatalf("seed %d: %q\nwrote %+v\nread  %+v (%v)", seed, line, f, got, err)
			}
		}
	}
	row := `"f.yaml"	row	""	"n"	"p"	"ph"	1	2	3	4	0	0	-	-	0	0`
	if _, err := parseFile("", row); err != nil {
		t.Fatalf("a good line refused: %v", err)
	}
	for _, bad := range []string{"", "x", `"f.yaml"`, `"f.yaml"	-`, `"f.yaml"	odd	""`,
		`"f.yaml"	row	""	"n"	"p"	"ph"	1	2	3	4	9	0	-	-	0	0`,       // a count past the line
		`"f.yaml"	row	""	"n"	"p"	"ph"	1	2	3	4	0	0	-	-	0	0	extra`, // a field more
		`"f.yaml"	row	""	"n"	"p"	"ph"	1	2	3	0	0	-	-	0	0`,         // a field less
		`"f.yaml"	row	""	"n"	"p"	"ph"	1	2	3	4	3	1	2	3	0	-	-	0	0`, // a contract of three numbers
		`"f.yaml"	row	""	"n"	"p"	"ph"	1	2	3	4	0	0	-	0	0`,         // no creation time (protocol 2)
		`"../x.yaml"	-	""`, `"d/x.yaml"	-	""`, `".x.yaml"	-	""`, `"x.txt"	-	""`, // not a manifest of the spool
	} {
		if _, err := parseFile("", bad); err == nil {
			t.Errorf("parseFile(%q) accepted", bad)
		}
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
	if v, err := VersionOf(path); err != nil || v.Inode == first.Inode {
		t.Errorf("VersionOf after the replacement: %+v (%v)", v, err)
	}
	if _, err := at("gone.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing name: %v", err)
	}
}

// TestPhaseAndReasonShown: how a listing shows each kind of file.
func TestPhaseAndReasonShown(t *testing.T) {
	running := &Row{Name: "r", Phase: v1alpha1.PhaseRunning, Conditions: []string{v1alpha1.ConditionAdmitted, "NoMemory"}}
	long := errors.New("line one\nline two " + string(bytes.Repeat([]byte("é"), 100)))
	for _, c := range []struct {
		what          string
		f             File
		phase, reason string
	}{
		{"a task", File{Row: running}, "Running", "NoMemory"},
		{"a task with no status", File{Row: &Row{Name: "n"}}, PhaseNew, ""},
		{"listed by name", File{Row: &Row{Name: "n"}, NotRead: true}, PhaseNew, ReasonNotRead},
		{"not parseable", File{Path: "/s/b.yaml", Err: &v1alpha1.SyntaxError{Err: errors.New("bad")}}, PhaseInvalid, (&v1alpha1.SyntaxError{Err: errors.New("bad")}).Error()},
		{"refused with no status", File{Row: &Row{Name: "i"}, Err: long}, PhaseInvalid, "line one; line two " + string(bytes.Repeat([]byte("é"), 58)) + "..."},
		{"refused, its status written", File{Row: &Row{Name: "j", Phase: v1alpha1.PhaseRejected, Conditions: []string{v1alpha1.ConditionValid, "InvalidSpec"}}, Err: long}, "Rejected", "InvalidSpec"},
	} {
		if p, r := c.f.Phase(), c.f.Reason(); p != c.phase || r != c.reason {
			t.Errorf("%s: phase %q reason %q, want %q %q", c.what, p, r, c.phase, c.reason)
		}
	}
}
