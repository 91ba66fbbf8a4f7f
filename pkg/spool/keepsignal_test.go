package spool

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestALeaseBreakWakesTheKeeper: a writer that opened the manifest before
// a write-back displaced it, and reopens that inode for writing once the
// keeper has looked, is let through when the kernel signals the break,
// not at the keeper's next sweep (made 20 s here, the grace 30 s); what it
// appends is merged into the manifest.
func TestALeaseBreakWakesTheKeeper(t *testing.T) {
	sweep := keeperSweep
	t.Cleanup(func() { keeperSweep = sweep }) // after the spool's Close
	keeperSweep = 20 * time.Second
	dir := fastTempDir(t)
	path := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(path, []byte(appendManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := Open(dir, Options{DisplacedGrace: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	old, err := os.Open(path) // the writer's hold on the version to be displaced
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := sp.WriteStatus(path, &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	sp.kmu.Lock()
	leased := len(sp.kept) == 1 && sp.kept[0].mode == keepLeased
	sp.kmu.Unlock()
	if !leased {
		t.Fatal("the displaced version is not kept under a lease")
	}
	for sp.stats.KeeperLooks.Load() == 0 { // its first look, after keeperPoll
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	w, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", old.Fd()), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	waited := time.Since(start)
	if _, err := w.WriteString("# through the displaced inode\n"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if waited > 10*time.Second {
		t.Errorf("the writer's open waited %v for the lease: the break did not wake the keeper", waited)
	}
	deadline := time.Now().Add(writerWait)
	for {
		got, _ := os.ReadFile(path)
		if bytes.Contains(got, []byte("# through the displaced inode\n")) && bytes.Contains(got, []byte("phase: Running")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the write to the displaced inode was not merged:\n%s", got)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("the writer's open waited %v; the keeper looked %d times", waited, sp.stats.KeeperLooks.Load())
	// The merge displaced a version too: end its grace, and wake the
	// keeper as a break would, so that Close need not wait 30 s.
	sp.kmu.Lock()
	for _, k := range sp.kept {
		k.until = time.Now()
	}
	sp.kmu.Unlock()
	if err := unix.Kill(os.Getpid(), unix.SIGIO); err != nil {
		t.Fatal(err)
	}
}
