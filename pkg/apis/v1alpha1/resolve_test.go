package v1alpha1

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSpecHash(t *testing.T) {
	a := validTask().Spec
	h := SpecHash(a)
	if len(h) != 16 {
		t.Fatalf("hash %q, want 16 hex digits", h)
	}
	if SpecHash(validTask().Spec) != h {
		t.Error("hash is not stable")
	}
	b := validTask().Spec
	b.Paused = true
	if SpecHash(b) != h {
		t.Error("pausing changed the hash: a pause is not a new generation")
	}
	b.RestartToken = "restart-1"
	if SpecHash(b) != h {
		t.Error("a restart token changed the hash: a restart alone is not a new generation")
	}
	c := validTask().Spec
	c.Resources.PerItem.Memory = qty("1Gi")
	d := validTask().Spec
	d.Resources.PerItem.Memory = qty("1024Mi")
	if SpecHash(c) != SpecHash(d) || SpecHash(c) == h {
		t.Error("equal quantities must hash alike, a new quantity must change the hash")
	}
	for _, edit := range []func(*TaskSpec){
		func(s *TaskSpec) { s.Command = append(s.Command, "--x") },
		func(s *TaskSpec) { s.Retries = 3 },
		func(s *TaskSpec) { s.Resources.Threads = 2 },
		func(s *TaskSpec) { s.BatchTimeout = &metav1.Duration{Duration: 1} },
		func(s *TaskSpec) { s.DependsOn = []string{"a"} },
	} {
		e := validTask().Spec
		edit(&e)
		if SpecHash(e) == h {
			t.Errorf("edit %+v kept the hash", e)
		}
	}
}

func TestResolveWorkingDir(t *testing.T) {
	for _, tc := range []struct{ wd, spool, want string }{
		{"", "/spool", "/spool"},
		{"", "/spool/", "/spool"},
		{"data/castle", "/spool", "/spool/data/castle"},
		{"../data", "/spool", "/data"},
		{"/data/castle/", "/spool", "/data/castle"},
	} {
		if got := ResolveWorkingDir(TaskSpec{WorkingDir: tc.wd}, tc.spool); got != tc.want {
			t.Errorf("ResolveWorkingDir(%q, %q) = %q, want %q", tc.wd, tc.spool, got, tc.want)
		}
	}
}

func TestResolveItems(t *testing.T) {
	spool := t.TempDir()
	imgs := filepath.Join(spool, "castle", "images")
	if err := os.MkdirAll(imgs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b.jpg", "a.jpg", "c.png", "10.jpg"} {
		if err := os.WriteFile(filepath.Join(imgs, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		spec TaskSpec
		want []string
		err  error
	}{
		{"count", TaskSpec{Items: Items{Count: ptr[int64](3)}}, []string{"0", "1", "2"}, nil},
		{"files relative and absolute", TaskSpec{WorkingDir: "castle", Items: Items{Files: []string{"images/b.jpg", "/abs/x.jpg", "../y.jpg"}}},
			[]string{imgs + "/b.jpg", "/abs/x.jpg", spool + "/y.jpg"}, nil},
		{"glob sorted", TaskSpec{WorkingDir: "castle", Items: Items{Glob: "images/*.jpg"}},
			[]string{imgs + "/10.jpg", imgs + "/a.jpg", imgs + "/b.jpg"}, nil},
		{"glob absolute workingDir", TaskSpec{WorkingDir: imgs, Items: Items{Glob: "*.png"}}, []string{imgs + "/c.png"}, nil},
		{"glob no match", TaskSpec{WorkingDir: "castle", Items: Items{Glob: "*.tif"}}, nil, ErrNoItems},
		{"no items", TaskSpec{}, nil, ErrNoItems},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveItems(tc.spec, spool)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if all := got.Range(0, got.Len()); err != nil || !slices.Equal(all, tc.want) {
				t.Fatalf("got %v, %v; want %v", all, err, tc.want)
			}
		})
	}
}

func TestEffectiveBatch(t *testing.T) {
	for _, tc := range []struct {
		b            BatchBounds
		total        int64
		wantMax, min int64
	}{
		{BatchBounds{Min: 1, Max: 0}, 40, 40, 1},   // glob default: the resolved count
		{BatchBounds{Min: 1, Max: 128}, 40, 40, 1}, // never above the item count
		{BatchBounds{Min: 8, Max: 16}, 40, 16, 8},  // as written
		{BatchBounds{Min: 50, Max: 0}, 40, 40, 40}, // min capped by the count
		{BatchBounds{Min: 1, Max: 0}, 0, 1, 1},     // never below 1
		{BatchBounds{Min: 2, Max: 10}, 0, 10, 2},   // count unknown: Max
	} {
		if got := tc.b.EffectiveMax(tc.total); got != tc.wantMax {
			t.Errorf("%+v.EffectiveMax(%d) = %d, want %d", tc.b, tc.total, got, tc.wantMax)
		}
		if got := tc.b.EffectiveMin(tc.total); got != tc.min {
			t.Errorf("%+v.EffectiveMin(%d) = %d, want %d", tc.b, tc.total, got, tc.min)
		}
		s := TaskSpec{Resources: Resources{Batch: tc.b}}
		if s.EffectiveBatchMax(tc.total) != tc.wantMax {
			t.Errorf("TaskSpec.EffectiveBatchMax disagrees with BatchBounds.EffectiveMax")
		}
	}
}

func TestNameFromFile(t *testing.T) {
	for in, want := range map[string]string{
		"/spool/a.yaml": "a", "b.yml": "b", "c.d.yaml": "c.d", "e.json": "e.json", "": "", "/": "",
	} {
		if got := NameFromFile(in); got != want {
			t.Errorf("NameFromFile(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGlobHasDoubleStarAndBraces(t *testing.T) {
	// The working directory's own name holds glob characters: literal.
	wd := filepath.Join(t.TempDir(), "shoot [2026] {a,b}")
	for _, f := range []string{"day1/IMG_1.JPG", "day1/IMG_2.jpg", "day2/raw/IMG_3.JPG", "IMG_0.jpg", "notes.txt"} {
		p := filepath.Join(wd, "images", filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(wd, "images")
	for _, tc := range []struct {
		pattern string
		want    []string
	}{
		{"images/**/*.{jpg,JPG}", []string{img + "/IMG_0.jpg", img + "/day1/IMG_1.JPG", img + "/day1/IMG_2.jpg", img + "/day2/raw/IMG_3.JPG"}},
		{"images/*/*.JPG", []string{img + "/day1/IMG_1.JPG"}},
		{"images/**/*.{JPG,J*}", []string{img + "/day1/IMG_1.JPG", img + "/day2/raw/IMG_3.JPG"}}, // two alternatives, one match each
		{"./images/../images/*.txt", []string{img + "/notes.txt"}},
		{"images/*.tif", nil},
	} {
		got, err := Glob(tc.pattern, wd)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Glob(%q) = %v, %v; want %v", tc.pattern, got, err, tc.want)
		}
	}
	// "../" leaves the working directory: still resolved.
	got, err := Glob("../../*/*.txt", filepath.Join(img, "day1"))
	if err != nil || len(got) != 1 || got[0] != img+"/notes.txt" {
		t.Errorf("Glob(../../*/*.txt) = %v, %v", got, err)
	}
	// An absolute pattern is the user's pattern, glob characters and all.
	plain := t.TempDir()
	if err := os.MkdirAll(filepath.Join(plain, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plain, "a", "b", "x.JPG"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Glob(plain+"/**/*.{jpg,JPG}", wd); err != nil || len(got) != 1 || got[0] != plain+"/a/b/x.JPG" {
		t.Errorf("absolute Glob = %v, %v", got, err)
	}
	if _, err := Glob("images/[a", wd); err == nil {
		t.Error("a malformed pattern was accepted")
	}
}

// TestACountOfItemsCostsNothingUntilABatchTakesIt is the attack of issue
// 32: count: 10000000 (the validator's maximum) took the controller to
// some 700 MiB for one short manifest, pinned after Done. Resolving a
// count allocates nothing; a batch's range is made when taken.
func TestACountOfItemsCostsNothingUntilABatchTakesIt(t *testing.T) {
	n := int64(MaxItemCount)
	spec := TaskSpec{Items: Items{Count: &n}}
	var l ItemList
	allocs := testing.AllocsPerRun(10, func() {
		var err error
		if l, err = ResolveItems(spec, "/spool"); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 || l.Len() != n {
		t.Errorf("resolving %d counted items: %v allocations, length %d", n, allocs, l.Len())
	}
	if got := l.Range(n-3, n); !slices.Equal(got, []string{"9999997", "9999998", "9999999"}) {
		t.Errorf("the last three items: %v", got)
	}
}
