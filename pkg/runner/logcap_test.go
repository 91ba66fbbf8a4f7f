package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// smallFS mounts a tmpfs of size bytes for the test (root only: CI runs
// as root).
func smallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a small tmpfs (CI runs as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// A batch that writes far more than its log's cap, on a state file system
// smaller than what it writes: the log and its rotated part stay within
// the cap (plus one read buffer), the batch is neither blocked nor failed,
// its progress line after the rotations is seen, and the end of the batch
// is in the log.
func TestALoudBatchKeepsItsLogWithinTheCap(t *testing.T) {
	const capBytes = 128 << 10
	fs := smallFS(t, "640k")
	s := testSpec(t, "sh", "-c", `head -c 8000000 /dev/zero | tr '\0' x; echo; echo LARDON3D_PROGRESS 1`)
	s.LogPath, s.RunDir = filepath.Join(fs, "t.log"), filepath.Join(fs, "run")
	s.LogMaxBytes = capBytes
	var last atomic.Int64
	last.Store(-1)
	s.OnProgress = func(n int64) { last.Store(n) }
	b := start(t, s)
	res := b.Wait()
	<-b.Done()
	if res.ExitCode != 0 || res.Reason != "" {
		t.Fatalf("batch ended %d %s %s", res.ExitCode, res.Reason, res.Message)
	}
	for _, p := range []string{s.LogPath, s.LogPath + RotatedLogSuffix} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > capBytes+32<<10 {
			t.Errorf("%s holds %d bytes, over the cap %d and a read buffer", p, st.Size(), capBytes)
		}
	}
	log, err := os.ReadFile(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "=== batch 0 ended: exit code 0") || !strings.HasPrefix(string(log), "=== log rotated") {
		t.Errorf("log:\n%s", tail(string(log), 600))
	}
	if last.Load() != 1 {
		t.Errorf("progress %d after the rotations, want 1", last.Load())
	}
}

// A full disk drops the batch's output: the batch is never blocked on its
// writes nor failed for them.
func TestAFullDiskDropsOutputWithoutBlockingTheBatch(t *testing.T) {
	fs := smallFS(t, "256k")
	s := testSpec(t, "sh", "-c", `head -c 2000000 /dev/zero | tr '\0' x`)
	s.LogPath, s.RunDir = filepath.Join(fs, "t.log"), t.TempDir()
	s.LogMaxBytes = 0 // no cap: the disk is the limit
	b := start(t, s)
	res := b.Wait()
	if res.ExitCode != 0 || res.Reason != "" {
		t.Fatalf("batch ended %d %s %s", res.ExitCode, res.Reason, res.Message)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
