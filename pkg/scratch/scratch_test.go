package scratch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestLeaseDirectoryLifeCycle: Create makes the directory on an existing
// volume (again is fine), refuses a path that is not a lease's and a volume
// gone; Release hands it to Run, which removes it with its content; after
// Run ended, Release removes at once.
func TestLeaseDirectoryLifeCycle(t *testing.T) {
	vol := t.TempDir()
	l := New("/spool", []string{vol}, zerolog.Nop())
	dir := filepath.Join(vol, l.Prefix()+"1")
	for range 2 {
		if err := l.Create(dir); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("stat %s: %v %v", dir, fi, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(filepath.Join(vol, "data")); !errors.Is(err, ErrNotALease) {
		t.Errorf("Create of a non-lease path: %v, want ErrNotALease", err)
	}
	if err := l.Create(filepath.Join(vol, "gone", l.Prefix()+"2")); err == nil {
		t.Error("Create on a missing volume succeeded")
	}
	// A lease's directory someone else made in advance (on a shared
	// volume, to be handed to another user's batch) is refused.
	if os.Geteuid() == 0 {
		squat := filepath.Join(vol, l.Prefix()+"9")
		if err := os.Mkdir(squat, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(squat, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if err := l.Create(squat); err == nil {
			t.Error("Create took a directory uid 4242 made in advance")
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	l.Release(dir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("released lease directory not removed")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	late := filepath.Join(vol, l.Prefix()+"3")
	if err := l.Create(late); err != nil {
		t.Fatal(err)
	}
	l.Release(late)
	if _, err := os.Stat(late); !os.IsNotExist(err) {
		t.Errorf("release after Run ended did not remove %s", late)
	}
	keep := filepath.Join(vol, "keep")
	if err := os.Mkdir(keep, 0o700); err != nil {
		t.Fatal(err)
	}
	l.Release(keep) // not a lease: refused
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a non-lease directory was removed: %v", err)
	}
}

// TestPrefixesDifferAcrossStartsAndLeftoversAreOursOnly: two Leases of one
// owner (two starts) have different prefixes of the documented form; the
// second removes the first's directories and nothing else: not another
// owner's, not its own, not a look-alike.
func TestPrefixesDifferAcrossStartsAndLeftoversAreOursOnly(t *testing.T) {
	vol := t.TempDir()
	first := New("/spool", nil, zerolog.Nop())
	second := New("/spool", []string{vol, filepath.Join(vol, "missing")}, zerolog.Nop())
	other := New("/other-spool", nil, zerolog.Nop())
	form := regexp.MustCompile(`^lardon3d-lease-[0-9a-f]{8}-[0-9a-f]{16}-$`)
	for _, p := range []string{first.Prefix(), second.Prefix(), other.Prefix()} {
		if !form.MatchString(p) {
			t.Errorf("prefix %q not of the documented form", p)
		}
	}
	if first.Prefix() == second.Prefix() || first.owner != second.owner || first.owner == other.owner {
		t.Fatalf("prefixes %s %s %s", first.Prefix(), second.Prefix(), other.Prefix())
	}
	gone := []string{first.Prefix() + "1", first.Prefix() + "12"}
	kept := []string{second.Prefix() + "1", other.Prefix() + "1", first.Prefix() + "x", first.Prefix() + "1-extra", "lardon3d-lease-7", "data"}
	for _, n := range append(append([]string(nil), gone...), kept...) {
		if err := os.MkdirAll(filepath.Join(vol, n, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	n, err := second.RemoveLeftovers()
	if n != len(gone) {
		t.Errorf("removed %d, want %d", n, len(gone))
	}
	if err == nil {
		t.Error("a missing volume gave no error")
	}
	for _, name := range gone {
		if _, err := os.Stat(filepath.Join(vol, name)); !os.IsNotExist(err) {
			t.Errorf("leftover %s not removed", name)
		}
	}
	for _, name := range kept {
		if _, err := os.Stat(filepath.Join(vol, name, "sub")); err != nil {
			t.Errorf("%s was touched: %v", name, err)
		}
	}
}

// TestALeaseDirectoryMadeInAdvanceIsRefused is the attack of issue 32: on
// a volume others may write to, a user made the lease directories to come
// (their names were predictable) with links inside, and a root
// controller handed them to its batches. A lease's directory must not
// exist before Create makes it, whoever owns it; one Create made and
// someone replaced with a link is refused too. (The governor's names end
// with a random nonce: TestLeasePrefixNamesTheLeaseDirectory.)
func TestALeaseDirectoryMadeInAdvanceIsRefused(t *testing.T) {
	vol := t.TempDir()
	l := New("/spool", []string{vol}, zerolog.Nop())
	early := filepath.Join(vol, l.Prefix()+"3-00112233aabbccdd")
	if err := os.Mkdir(early, 0o700); err != nil { // even the controller's own user's
		t.Fatal(err)
	}
	if err := l.Create(early); err == nil {
		t.Error("Create took a directory made before its lease")
	}
	dir := filepath.Join(vol, l.Prefix()+"4-00112233aabbccdd")
	if err := l.Create(dir); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(dir); err != nil {
		t.Fatalf("the retry of a batch under its lease: %v", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", dir); err != nil {
		t.Fatal(err)
	}
	if err := l.Create(dir); err == nil {
		t.Error("Create took a link put in place of the lease's directory")
	}
}
