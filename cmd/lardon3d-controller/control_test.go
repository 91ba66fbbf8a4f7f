package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/control"
)

// The checks spool add makes of what a peer sent, before anything is
// served: the directory opened must be the peer's, the path must name it
// with no symlink on the way (a swap between the open and the request is
// refused), and a file is not a directory.
func TestAddSpoolRefusesWhatThePeerMayNotAdd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chowns directories: run it as root, as the suite does")
	}
	base := t.TempDir()
	mk := func(name string, uid int) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine, other, theirs := mk("mine", 65534), mk("other", 65534), mk("theirs", 4242)
	link := filepath.Join(base, "link")
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(file, 65534, 65534)
	nobody := control.Peer{UID: 65534, GID: 65534, PID: 1}
	for _, c := range []struct {
		name, open, path string
		want             string
	}{
		{"another user's directory", theirs, theirs, "a user may add only their own spool"},
		{"a path swapped for another directory of theirs", mine, other, "swapped"},
		{"a path through a symlink", mine, link, "symlink"},
		{"a relative path", mine, "mine", "absolute"},
		{"a file", file, file, "not a directory"},
	} {
		f, err := os.Open(c.open)
		if err != nil {
			t.Fatal(err)
		}
		_, err = controlBackend{}.AddSpool(nobody, f, c.path)
		f.Close()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}
