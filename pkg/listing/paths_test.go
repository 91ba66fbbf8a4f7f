package listing

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// TestManifestPathsAreJoined: the paths listings make are those
// filepath.Join makes, whatever form the spool directory is given in.
func TestManifestPathsAreJoined(t *testing.T) {
	names := []string{"a.yaml", "b.yml", "..yaml", "notes.txt", ".hidden.yaml", "c.yaml"}
	for _, dir := range []string{"", ".", "./", "/", "//", "spool", "spool/", "./spool//x/..", "/tmp/s", "../s", "..", "/tmp/s/"} {
		var want []string
		for _, name := range names {
			if spool.IsManifestName(name) {
				want = append(want, filepath.Join(dir, name))
			}
		}
		if got := ManifestPaths(dir, names); !slices.Equal(got, want) {
			t.Errorf("ManifestPaths(%q): %q, want %q", dir, got, want)
		}
	}
}
