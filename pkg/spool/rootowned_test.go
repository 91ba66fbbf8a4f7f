package spool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestARootOwnedManifestIsRefusedByAControllerThatIsNotRoot is the attack
// of issue 32: a root-owned manifest in the spool of a controller that is
// not root (after `sudo cp`) ran, but its status could never be written
// (the new version cannot be given back to root): New forever, run again
// at every restart. It is refused up front, saying what to do; a root
// controller still takes it, and a user's own file is taken.
func TestARootOwnedManifestIsRefusedByAControllerThatIsNotRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a root-owned file beside a user's (CI runs as root)")
	}
	dir := t.TempDir()
	for _, f := range []string{"roots.yaml", "mine.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("kind: Task\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const user = 65534
	if err := os.Chown(filepath.Join(dir, "mine.yaml"), user, user); err != nil {
		t.Fatal(err)
	}
	r, err := openRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	// As root, root's file is taken.
	tg, err := r.resolve("roots.yaml")
	if err != nil {
		t.Fatalf("a root controller refused root's file: %v", err)
	}
	tg.close()
	// As the user the spool belongs to.
	r.euid, r.owner = user, user
	if _, err := r.resolve("roots.yaml"); !errors.Is(err, ErrForeignOwner) || !strings.Contains(err.Error(), "chown it to uid 65534") {
		t.Errorf("root's file in a user controller's spool: %v, want refused, saying to chown it", err)
	}
	if _, ok := r.statPlain("roots.yaml"); ok {
		t.Error("statPlain took root's file")
	}
	tg, err = r.resolve("mine.yaml")
	if err != nil {
		t.Fatalf("the user's own file: %v", err)
	}
	tg.close()
}
