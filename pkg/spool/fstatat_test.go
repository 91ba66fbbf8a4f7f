package spool

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFstatatIsUnixFstatat holds the raw Fstatat to unix.Fstatat: the same
// stat or the same error, with and without AT_SYMLINK_NOFOLLOW, for a file,
// a link to it, a dangling link, a missing name, a directory and a name
// the kernel cannot take.
func TestFstatatIsUnixFstatat(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("kind: Task\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("gone.yaml", filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dirfd := int(d.Fd())
	for _, name := range []string{"a.yaml", "link.yaml", "dangling.yaml", "missing.yaml", "sub", "nul\x00.yaml", filepath.Join(dir, "a.yaml")} {
		for _, flags := range []int{0, unix.AT_SYMLINK_NOFOLLOW} {
			var got, want unix.Stat_t
			gotErr := Fstatat(dirfd, name, &got, flags)
			wantErr := unix.Fstatat(dirfd, name, &want, flags)
			if gotErr != wantErr { // both nil, or the same errno
				t.Errorf("%q flags %#x: error %v, unix.Fstatat's %v", name, flags, gotErr, wantErr)
				continue
			}
			if gotErr == nil && (got.Ino != want.Ino || got.Mode != want.Mode || got.Size != want.Size || got.Mtim != want.Mtim) {
				t.Errorf("%q flags %#x: %+v, unix.Fstatat's %+v", name, flags, got, want)
			}
		}
	}
	// NOFOLLOW is passed on: the link itself, not its target.
	var link, file unix.Stat_t
	if Fstatat(dirfd, "link.yaml", &link, unix.AT_SYMLINK_NOFOLLOW) != nil || Fstatat(dirfd, "a.yaml", &file, 0) != nil {
		t.Fatal("stat failed")
	}
	if link.Mode&unix.S_IFMT != unix.S_IFLNK || link.Ino == file.Ino {
		t.Errorf("the link with AT_SYMLINK_NOFOLLOW: mode %o inode %d, the file's inode %d", link.Mode, link.Ino, file.Ino)
	}
}
