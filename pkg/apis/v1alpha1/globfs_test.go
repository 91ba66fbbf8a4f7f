package v1alpha1

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// tree makes files (with their directories) and links (name → target)
// under a new directory, and returns it.
func tree(t *testing.T, files []string, links map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, target := range links {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// globIn runs Glob in dir and returns the matches relative to dir.
func globIn(t *testing.T, pattern, dir string) ([]string, error) {
	t.Helper()
	done := make(chan struct{})
	var out []string
	var err error
	go func() {
		defer close(done)
		out, err = Glob(pattern, dir)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("glob %q did not return", pattern)
	}
	for i, m := range out {
		out[i], _ = filepath.Rel(dir, m)
	}
	return out, err
}

// TestGlobDoesNotFollowLinksUpTheTree is the attack of issue 32: two links
// to their parent under data/ made ** branch exponentially on the owner
// goroutine (the controller froze, SIGTERM went unanswered). A link to an
// ancestor is a loop: not followed.
func TestGlobDoesNotFollowLinksUpTheTree(t *testing.T) {
	dir := tree(t, []string{"data/a.jpg", "data/d/b.jpg"}, map[string]string{"data/d/up1": "..", "data/d/up2": "..", "data/d/e/up3": "../.."})
	got, err := globIn(t, "data/**/*.jpg", dir)
	if err != nil || !slices.Equal(got, []string{"data/a.jpg", "data/d/b.jpg"}) {
		t.Errorf("got %v, %v; want each image once", got, err)
	}
}

// TestGlobFollowsALinkInsideTheTreeOnce: a link to a directory of the tree
// is followed (its files are matched through it too), two links to each
// other's directories are not followed round and round, and a link out of
// the working directory is not followed by the walk, unless the pattern
// names it.
func TestGlobFollowsALinkInsideTheTreeOnce(t *testing.T) {
	outside := tree(t, []string{"secret.jpg"}, nil)
	dir := tree(t, []string{"x/1.jpg", "y/2.jpg", "shots/3.jpg"},
		map[string]string{"x/toy": "../y", "y/tox": "../x", "link/shots": "../shots", "out": outside})
	got, err := globIn(t, "**/*.jpg", dir)
	want := []string{"link/shots/3.jpg", "shots/3.jpg", "x/1.jpg", "x/toy/2.jpg", "y/2.jpg", "y/tox/1.jpg"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("**/*.jpg: got %v, %v; want %v", got, err, want)
	}
	if got, err := globIn(t, "out/*.jpg", dir); err != nil || !slices.Equal(got, []string{"out/secret.jpg"}) {
		t.Errorf("a link named in the pattern: got %v, %v", got, err)
	}
}

// TestGlobStopsAtItsBounds: a glob that reads more entries than it may
// fails with ErrGlobTooLarge rather than walking on.
func TestGlobStopsAtItsBounds(t *testing.T) {
	var files []string
	for i := range 200 {
		files = append(files, filepath.Join("d"+strconv.Itoa(i%10), strconv.Itoa(i)+".jpg"))
	}
	dir := tree(t, files, nil)
	if got, err := globIn(t, "**/*.jpg", dir); err != nil || len(got) != 200 {
		t.Fatalf("within bounds: %d matches, %v", len(got), err)
	}
	old := globMaxEntries
	globMaxEntries = 100
	t.Cleanup(func() { globMaxEntries = old })
	if _, err := globIn(t, "**/*.jpg", dir); !errors.Is(err, ErrGlobTooLarge) {
		t.Errorf("past the bound: %v, want ErrGlobTooLarge", err)
	}
	if _, err := globIn(t, filepath.Join(dir, "**/*.jpg"), "/"); !errors.Is(err, ErrGlobTooLarge) {
		t.Errorf("an absolute pattern past the bound: %v, want ErrGlobTooLarge", err)
	}
}
