package spool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func TestEditFileKeepsModeAndOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.yaml")
	if err := os.WriteFile(path, []byte(manifest("a")), 0o640); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if os.Geteuid() == 0 {
		gid = 4343 // another group; the owner must be root, as the controller
		if err := os.Chown(path, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if err := EditFile(path, func(b []byte) ([]byte, error) { return ReplaceStatus(b, doneStatus) }); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o640 || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Fatalf("mode %v owner %d:%d, want 0640 %d:%d", fi.Mode(), st.Uid, st.Gid, uid, gid)
	}
	got, _ := os.ReadFile(path)
	if want := manifest("a") + doneBlock; string(got) != want {
		t.Fatalf("got %q want %q", got, want)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
}

var envValue = regexp.MustCompile(`value: "(\d+)"`)

// TestConcurrentSpecEditsSurvive is the write-back stress test. A writer
// edits spec (an env value 1..N) the way editors do — read, change, write
// a temp file and rename it over the manifest, and every 7th step an
// in-place truncate+write — while another goroutine writes status back in
// a loop. After each step the writer waits until two full write-back
// rounds have ended (so at least one started after its edit) and checks
// its value is still in the file: a write-back that reverted the edit (for
// instance by renaming a status written onto the previous version) fails
// the test at that step. It also reports how often each guard caught a
// concurrent write, which measures the window.
func TestConcurrentSpecEditsSurvive(t *testing.T) {
	const steps = 1000
	dir := fastTempDir(t)
	path := filepath.Join(dir, "t.yaml")
	initial := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [echo]\n  env:\n  - name: STEP\n    value: \"0\" # the writer's counter\n  items: {count: 1}\n"
	if err := os.WriteFile(path, []byte(initial), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	stats := &sp.stats
	var (
		rounds   atomic.Int64
		tick     = make(chan struct{}, 1)
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		refused  int
		conflict int
		writeErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			st := &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, QueueSeq: i}
			err := sp.edit(path, func(b []byte) ([]byte, error) { return ReplaceStatus(b, st) })
			switch {
			case err == nil:
			case errors.Is(err, ErrNotRewritable):
				if refused == 0 {
					t.Logf("first refusal: %v", err)
				}
				refused++ // read a file truncated by an in-place write
			case errors.Is(err, ErrConflict):
				conflict++
			default:
				writeErr = err
				return
			}
			rounds.Add(1)
			select {
			case tick <- struct{}{}:
			default:
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	start := time.Now()
	for i := 1; i <= steps; i++ {
		cur, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		next := envValue.ReplaceAll(cur, []byte(`value: "`+strconv.Itoa(i)+`"`))
		if bytes.Equal(next, cur) {
			t.Fatalf("step %d: no counter in %q", i, cur)
		}
		if i%7 == 0 {
			if err := os.WriteFile(path, next, 0o600); err != nil { // in place
				t.Fatal(err)
			}
		} else {
			tmp := filepath.Join(dir, ".editor-tmp")
			if err := os.WriteFile(tmp, next, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
		target := rounds.Load() + 2
		for rounds.Load() < target {
			select {
			case <-tick:
			case <-time.After(waitFor):
				t.Fatalf("step %d: write-back stalled (err %v)", i, writeErr)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := envValue.FindSubmatch(got)
		if m == nil || string(m[1]) != strconv.Itoa(i) {
			t.Fatalf("step %d: the writer's edit was lost; file:\n%s", i, got)
		}
		if !bytes.Contains(got, []byte("status:\n  phase: Running")) {
			t.Fatalf("step %d: no status after two write-back rounds:\n%s", i, got)
		}
	}
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	final, _ := os.ReadFile(path)
	if _, err := v1alpha1.ParseManifest("t.yaml", final); err != nil {
		var syn *v1alpha1.SyntaxError
		if errors.As(err, &syn) {
			t.Fatalf("final file unparseable: %v", err)
		}
	}
	if !bytes.Contains(final, []byte(fmt.Sprintf("value: \"%d\" # the writer's counter", steps))) {
		t.Fatalf("final file lacks the last edit:\n%s", final)
	}
	t.Logf("%d edits in %v; %d write-back rounds: %d found a writer at work, %d conflicts caught before the swap, %d after it (undone), %d writes merged from a displaced version, %d kept as conflicts; %d reads of a half-written file refused, %d gave up",
		steps, time.Since(start).Round(time.Millisecond), stats.Rounds.Load(), stats.Busy.Load(), stats.PreConflicts.Load(), stats.PostConflicts.Load(), stats.Merges.Load(), stats.Conflicts.Load(), refused, conflict)
}

// fastTempDir is a temporary directory on tmpfs when the machine has one:
// the stress test is about interleavings, not about the disk's fsync.
func fastTempDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "spool-test-"); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}
