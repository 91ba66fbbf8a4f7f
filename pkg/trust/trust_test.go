package trust

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestOwnDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return d
	}
	own := mk("own", 0o700)
	if err := OwnDir(own, "state directory"); err != nil {
		t.Errorf("a 0700 directory of ours: %v", err)
	}
	if err := OwnDir(mk("readable", 0o755), "state directory"); err != nil {
		t.Errorf("a 0755 directory of ours: %v", err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(own, link); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"writable by its group": mk("group", 0o770),
		"writable by all":       mk("all", 0o777),
		"a link":                link,
		"below a shared one":    filepath.Join(mk("shared", 0o777), "sub"),
	}
	if err := os.Mkdir(bad["below a shared one"], 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		other := mk("other", 0o700)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		bad["owned by another user"] = other
	}
	for what, dir := range bad {
		if err := OwnDir(dir, "state directory"); !errors.Is(err, ErrUntrusted) {
			t.Errorf("%s (%s): %v, want ErrUntrusted", what, dir, err)
		}
	}
}
