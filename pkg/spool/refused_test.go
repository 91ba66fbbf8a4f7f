package spool

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRefusedCountsTheManifestsIgnoredWithAReason: a manifest the checked
// path refuses (not a regular file, a link leading out of the spool,
// another user's file) is never served, and Refused says how many there
// are now, so that --exit-when-done does not call a run all Done; fixed
// or removed, it no longer counts. The files served are not counted.
func TestRefusedCountsTheManifestsIgnoredWithAReason(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make another user's file (CI runs as root)")
	}
	outside := filepath.Join(t.TempDir(), "outside.yaml")
	if err := os.WriteFile(outside, []byte(manifest("out")), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(dir string) {
		if err := syscall.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifest("a")), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	h.expect(Added, "a")
	h.expect(Synced, "")
	if n := h.sp.Refused(); n != 1 {
		t.Fatalf("a FIFO named fifo.yaml beside a manifest: Refused %d, want 1", n)
	}
	if err := os.Symlink(outside, h.path("out.yaml")); err != nil {
		t.Fatal(err)
	}
	foreign := h.path(".theirs")
	if err := os.WriteFile(foreign, []byte(manifest("theirs")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(foreign, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(foreign, h.path("theirs.yaml")); err != nil {
		t.Fatal(err)
	}
	h.barrier("b1")
	if n := h.sp.Refused(); n != 3 {
		t.Fatalf("a FIFO, a link out of the spool, another user's file: Refused %d, want 3", n)
	}
	// Fixed: the link replaced by a file of ours is served; removed: gone.
	if err := os.Remove(h.path("out.yaml")); err != nil {
		t.Fatal(err)
	}
	h.write("out.yaml", manifest("out"))
	h.expect(Added, "out")
	if err := os.Remove(h.path("fifo.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(h.path("theirs.yaml"), 0, 0); err != nil {
		t.Fatal(err)
	}
	h.write("theirs.yaml", manifest("theirs"))
	h.expect(Added, "theirs")
	h.barrier("b2")
	if n := h.sp.Refused(); n != 0 {
		t.Fatalf("every refused manifest fixed or removed: Refused %d, want 0", n)
	}
}
