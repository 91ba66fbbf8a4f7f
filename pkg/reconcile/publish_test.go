package reconcile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAPublishedFileSurvivesAFullDisk is the attack of issue 32: on a full
// state file system the side files were left empty, with their dotfiles.
// A publication that cannot be written leaves the old version whole and
// no dotfile behind. (A 16 KiB tmpfs stands for the full disk.)
func TestAPublishedFileSurvivesAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (CI runs as root)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16k"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	old := []byte(`{"version":1}`)
	if err := PublishFile(dir, writeErrorsFile, old); err != nil {
		t.Fatal(err)
	}
	if err := PublishFile(dir, writeErrorsFile, bytes.Repeat([]byte("x"), 1<<20)); err == nil {
		t.Fatal("a megabyte published on a 16 KiB file system")
	}
	got, err := os.ReadFile(filepath.Join(dir, writeErrorsFile))
	if err != nil || !bytes.Equal(got, old) {
		t.Errorf("after the failed publication: %q, %v; want the old version", got, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("the state directory holds %d files, want the published one alone", len(ents))
	}
}
