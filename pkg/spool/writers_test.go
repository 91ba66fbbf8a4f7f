package spool

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/internal/testseed"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// statusWriter writes status into path in a loop, as fast as it can, until
// stopped; it counts the rounds and the errors that are not "try later".
type statusWriter struct {
	rounds atomic.Int64
	stop   chan struct{}
	done   chan struct{}
	err    atomic.Value
}

func startStatusWriter(t *testing.T, sp *Spool, path string) *statusWriter {
	t.Helper()
	w := &statusWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := int64(1); ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			st := &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, QueueSeq: i}
			err := sp.WriteStatus(path, st)
			switch {
			case err == nil, errors.Is(err, ErrBusy), errors.Is(err, ErrNotRewritable), errors.Is(err, ErrConflict), errors.Is(err, os.ErrNotExist), errors.Is(err, ErrOutsideSpool):
			default:
				w.err.Store(err)
				return
			}
			w.rounds.Add(1)
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *statusWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *statusWriter) check(t *testing.T) {
	t.Helper()
	if err, _ := w.err.Load().(error); err != nil {
		t.Fatalf("status writer: %v", err)
	}
}

// waitRounds waits until n more write-back rounds ended.
func (w *statusWriter) waitRounds(t *testing.T, n int64) {
	t.Helper()
	target := w.rounds.Load() + n
	deadline := time.Now().Add(waitFor)
	for w.rounds.Load() < target {
		w.check(t)
		if time.Now().After(deadline) {
			t.Fatalf("write-back stalled")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

const appendManifest = "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [echo]\n  items: {count: 1}\n"

// appendLine opens path without truncation in append mode, writes, closes:
// what `echo line >> path` does.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// inPlaceWrite rewrites path through the same inode, without truncating
// first (open O_WRONLY, write from offset 0, cut to length, close), as
// `vim -es` does with its default 'backupcopy'.
func inPlaceWrite(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func newTestSpool(t *testing.T, dir string) *Spool {
	t.Helper()
	sp, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	return sp
}

func logStats(t *testing.T, sp *Spool) {
	t.Helper()
	s := &sp.stats
	t.Logf("write-back rounds %d: %d found a writer at work, %d conflicts before the swap, %d after it (undone), %d writes merged from a displaced version, %d kept as conflict copies",
		s.Rounds.Load(), s.Busy.Load(), s.PreConflicts.Load(), s.PostConflicts.Load(), s.Merges.Load(), s.Conflicts.Load())
}

// TestAppendsDuringStatusWrites: 1,500 `>>`-style appends, each a fresh
// open/write/close a little apart, against continuous status write-backs;
// every appended line must be in the file at the end, once.
func TestAppendsDuringStatusWrites(t *testing.T) {
	const n = 1500
	dir := fastTempDir(t)
	path := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(path, []byte(appendManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := newTestSpool(t, dir)
	w := startStatusWriter(t, sp, path)
	for i := 1; i <= n; i++ {
		if err := appendLine(path, fmt.Sprintf("# append-%d\n", i)); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			w.waitRounds(t, 1) // interleave with the write-backs
		}
	}
	w.waitRounds(t, 2)
	w.halt()
	w.check(t)
	sp.Close() // the displaced versions' grace periods are over
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	logStats(t, sp)
	lost := 0
	for i := 1; i <= n; i++ {
		if c := bytes.Count(got, []byte(fmt.Sprintf("# append-%d\n", i))); c != 1 {
			lost++
			if lost < 5 {
				t.Errorf("append-%d found %d times", i, c)
			}
		}
	}
	if lost > 0 || !bytes.Contains(got, []byte("status:\n  phase: Running")) {
		t.Fatalf("%d of %d appends lost or doubled; status written: %v", lost, n, bytes.Contains(got, []byte("status:")))
	}
}

// TestInPlaceWritesDuringStatusWrites: 200 in-place rewrites (the same
// inode, no truncation on open) against continuous write-backs; after each,
// once two more write-back rounds ended, the edit is there, or, when the
// writer's open reached the version a round was displacing (it broke the
// lease), it is there once the keeper merged it back (the break wakes the
// keeper; on a loaded machine two rounds can end before it merges).
func TestInPlaceWritesDuringStatusWrites(t *testing.T) {
	const n = 200
	dir := fastTempDir(t)
	path := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(path, []byte(appendManifest+"# edit 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := newTestSpool(t, dir)
	w := startStatusWriter(t, sp, path)
	edit := regexp.MustCompile(`# edit \d+`)
	late := 0
	for i := 1; i <= n; i++ {
		cur, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		next := edit.ReplaceAll(cur, []byte("# edit "+strconv.Itoa(i)))
		if err := inPlaceWrite(path, next); err != nil {
			t.Fatal(err)
		}
		w.waitRounds(t, 2)
		want := []byte("# edit " + strconv.Itoa(i) + "\n")
		merges := sp.stats.Merges.Load()
		if got, _ := os.ReadFile(path); !bytes.Contains(got, want) {
			deadline := time.Now().Add(writerWait)
			for !bytes.Contains(got, want) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
				got, _ = os.ReadFile(path)
			}
			if !bytes.Contains(got, want) {
				t.Fatalf("edit %d lost:\n%s", i, got)
			}
			if sp.stats.Merges.Load() == merges {
				t.Fatalf("edit %d arrived late without the keeper merging it", i)
			}
			late++
		}
	}
	w.halt()
	w.check(t)
	logStats(t, sp)
	t.Logf("%d of %d edits arrived through the keeper after the two rounds", late, n)
}

// TestSymlinkFlippedOutsideNeverWritten: a.yaml is flipped 100 times
// between a target inside the spool (sub/real.yaml) and a file outside it,
// each flip an atomic rename of a new link, while status is written to
// a.yaml continuously; the outside file never changes by one byte.
func TestSymlinkFlippedOutsideNeverWritten(t *testing.T) {
	dir := fastTempDir(t)
	outDir := fastTempDir(t)
	outside := filepath.Join(outDir, "victim.yaml")
	if err := os.WriteFile(outside, []byte(appendManifest+"# outside\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(outside)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(dir, "sub", "real.yaml")
	if err := os.WriteFile(inside, []byte(appendManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "a.yaml")
	if err := os.Symlink("sub/real.yaml", link); err != nil {
		t.Fatal(err)
	}
	sp := newTestSpool(t, dir)
	w := startStatusWriter(t, sp, link)
	flip := func(to string) {
		tmp := filepath.Join(dir, ".flip")
		_ = os.Remove(tmp)
		if err := os.Symlink(to, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, link); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		flip(outside)
		w.waitRounds(t, 1)
		flip("sub/real.yaml")
		w.waitRounds(t, 1)
		if got, _ := os.ReadFile(outside); !bytes.Equal(got, want) {
			t.Fatalf("round %d: the file outside the spool was written:\n%s", i, got)
		}
	}
	w.halt()
	w.check(t)
	if err := sp.WriteStatus(link, &v1alpha1.TaskStatus{}); err != nil {
		t.Fatalf("write through the inside link: %v", err)
	}
	flip(outside)
	if err := sp.WriteStatus(link, &v1alpha1.TaskStatus{}); !errors.Is(err, ErrOutsideSpool) {
		t.Fatalf("write through the outside link: %v, want ErrOutsideSpool", err)
	}
	sp.Close() // every displaced version's grace period is over
	if got, _ := os.ReadFile(outside); !bytes.Equal(got, want) {
		t.Fatalf("the file outside the spool was written:\n%s", got)
	}
	if got, _ := os.ReadFile(inside); !bytes.Contains(got, []byte("status:")) {
		t.Fatalf("the file inside was never written:\n%s", got)
	}
}

// TestWriteBackRefusesWhatItMustNotOpen: a FIFO, a socket, a symlink to a
// FIFO and a directory on the way that is a symlink are refused at once
// (nothing blocks).
func TestWriteBackRefusesWhatItMustNotOpen(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "sock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Symlink("fifo.yaml", filepath.Join(dir, "tofifo.yaml")); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "x.yaml"), []byte(appendManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(dir, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d/x.yaml", filepath.Join(dir, "viadir.yaml")); err != nil {
		t.Fatal(err)
	}
	sp := newTestSpool(t, dir)
	for name, want := range map[string]error{"fifo.yaml": ErrNotRegular, "sock.yaml": ErrNotRegular, "tofifo.yaml": ErrNotRegular, "viadir.yaml": ErrOutsideSpool} {
		done := make(chan error, 1)
		go func() { done <- sp.WriteStatus(filepath.Join(dir, name), &v1alpha1.TaskStatus{}) }()
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", name, err, want)
			}
		case <-time.After(waitFor):
			t.Fatalf("%s: write-back blocked", name)
		}
		if _, err := ReadManifest(dir, name, 0); !errors.Is(err, want) {
			t.Errorf("ReadManifest %s: %v, want %v", name, err, want)
		}
	}
}

// TestWatchSkipsFIFOAndSocket: non-regular manifests, present at start or
// added later, are ignored without holding up the others.
func TestWatchSkipsFIFOAndSocket(t *testing.T) {
	var ln net.Listener
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
	if err := syscall.Mkfifo(h.path("fifo2.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if ln, err = net.Listen("unix", h.path("sock.yaml")); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Symlink("fifo2.yaml", h.path("tofifo.yaml")); err != nil {
		t.Fatal(err)
	}
	h.barrier("b")
}

// TestWatchIgnoresForeignSymlink: in a shared spool, a symlink owned by
// another user to the controller's own manifest is ignored (it could
// otherwise take the task over, or cancel it by being removed), and a
// write-back through it is refused.
func TestWatchIgnoresForeignSymlink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to lchown")
	}
	h := newHarness(t, nil)
	h.write("legit.yaml", manifest("legit"))
	h.expect(Added, "legit")
	tmp := h.path(".evil")
	if err := os.Symlink("legit.yaml", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(tmp, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, h.path("evil.yaml")); err != nil {
		t.Fatal(err)
	}
	h.barrier("z")
	if err := h.sp.WriteStatus(h.path("evil.yaml"), &v1alpha1.TaskStatus{}); !errors.Is(err, ErrForeignOwner) {
		t.Fatalf("write-back through another user's link: %v", err)
	}
	if err := os.Remove(h.path("evil.yaml")); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(time.Hour)
	h.barrier("z2") // no Deleted for legit or evil
}

// TestEditorSaveAndRename: a manifest moved away and written back (emacs'
// first save) within the grace period is the same manifest (no event); one
// renamed to another file name with the same metadata.name is Renamed, and
// no Deleted follows; one that stays away is Deleted after the grace.
func TestEditorSaveAndRename(t *testing.T) {
	h := newHarness(t, nil)
	named := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: job\nspec:\n  command: [echo]\n  items: {count: 1}\n"
	h.write("x.yaml", named)
	h.expect(Added, "x")
	// Emacs: mv x.yaml x.yaml~; cp x.yaml~ x.yaml.
	if err := os.Rename(h.path("x.yaml"), h.path("x.yaml~")); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(h.path("x.yaml~"))
	if err := os.WriteFile(h.path("x.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	h.barrier("b1")
	h.clock.Step(2 * DefaultDeleteGrace)
	h.barrier("b2") // no Deleted came

	if err := os.Rename(h.path("x.yaml"), h.path("y.yaml")); err != nil {
		t.Fatal(err)
	}
	ev := h.expect(Renamed, "y")
	if ev.OldPath != h.path("x.yaml") || ev.Task == nil || ev.Task.Metadata.Name != "job" {
		t.Fatalf("Renamed: %+v", ev)
	}
	h.clock.Step(2 * DefaultDeleteGrace)
	h.barrier("b3")

	if err := os.Remove(h.path("y.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitSettleTimer()
	h.clock.Step(DefaultDeleteGrace)
	h.expect(Deleted, "y")
}

// TestLockOneController: the second Lock of a spool fails at once naming
// this process; after Unlock it succeeds.
func TestLockOneController(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, ".lardon3d")
	l, err := Lock(dir, state)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir, filepath.Join(t.TempDir(), "elsewhere"))
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || le.PID != os.Getpid() {
		t.Fatalf("second lock: %v, want a LockedError naming PID %d", err, os.Getpid())
	}
	l.Unlock()
	l2, err := Lock(dir, state)
	if err != nil {
		t.Fatalf("after unlock: %v", err)
	}
	l2.Unlock()
}

// TestRunRemovesLeftovers: Run removes this package's temporary files by
// exact name, and nothing else.
func TestRunRemovesLeftovers(t *testing.T) {
	keep := []string{".t.yaml.swp", ".t.yaml.lardon3d-zzzzzzzzzzzz.tmp", ".t.yaml.lardon3d-0123456789ab.tmp~", "t.yaml.lardon3d-0123456789ab.tmp", ".t.yaml.lardon3d-0123456789a.tmp"}
	drop := []string{".t.yaml.lardon3d-0123456789ab.tmp", ".x y.yml.lardon3d-abcdefabcdef.tmp"}
	var dir string
	h := newHarness(t, func(d string) {
		dir = d
		for _, n := range append(append([]string{}, keep...), drop...) {
			if err := os.WriteFile(filepath.Join(d, n), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	})
	h.expect(Synced, "")
	for _, n := range keep {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s removed: %v", n, err)
		}
	}
	for _, n := range drop {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", n, err)
		}
	}
}

// TestMixedWritersAgainstStatusWrites is the fuzz-style test of the write
// path: a writer edits the manifest at random, by rename into place, in
// place through the same inode, by `>>` append and by truncate-and-write,
// against continuous status write-backs. Invariants, checked after every
// edit once two more write-back rounds ended: the file parses, it holds
// the writer's counter of this edit and every line appended since the last
// whole-file rewrite (nothing the writer wrote is lost), and status is
// there. The seed is fixed in make test (see internal/testseed).
func TestMixedWritersAgainstStatusWrites(t *testing.T) {
	const steps = 400
	rng := rand.New(rand.NewPCG(testseed.Seeds(t, 11)[0], 0))
	dir := fastTempDir(t)
	path := filepath.Join(dir, "t.yaml")
	body := func(i int) string {
		return "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [echo]\n  env:\n  - name: STEP\n    value: \"" + strconv.Itoa(i) + "\"\n  items: {count: 1}\n"
	}
	if err := os.WriteFile(path, []byte(body(0)), 0o600); err != nil {
		t.Fatal(err)
	}
	sp := newTestSpool(t, dir)
	w := startStatusWriter(t, sp, path)
	counter := regexp.MustCompile(`value: "(\d+)"`)
	var appended []string // lines appended since the last whole rewrite
	kinds := map[string]int{}
	for i := 1; i <= steps; i++ {
		cur, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		next := counter.ReplaceAll(cur, []byte(`value: "`+strconv.Itoa(i)+`"`))
		k := rng.IntN(4)
		switch k {
		case 0:
			kinds["rename"]++
			tmp := filepath.Join(dir, ".editor-tmp")
			if err := os.WriteFile(tmp, next, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		case 1:
			kinds["in-place"]++
			err = inPlaceWrite(path, next)
		case 2:
			kinds["append"]++
			line := fmt.Sprintf("# step %d appended\n", i)
			appended = append(appended, line)
			// The counter is not changed by an append: rewrite it first.
			if err = inPlaceWrite(path, next); err == nil {
				err = appendLine(path, line)
			}
		case 3:
			kinds["truncate+write"]++
			err = os.WriteFile(path, next, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		w.waitRounds(t, 2)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		has := func(got []byte) bool {
			m := counter.FindSubmatch(got)
			return m != nil && string(m[1]) == strconv.Itoa(i)
		}
		// An edit that reached the version a write-back displaced is merged
		// into the manifest by the keeper, at the end of that version's
		// grace period (Options.DisplacedGrace): later than two rounds when
		// they are quick. It must come, not be lost.
		for deadline := time.Now().Add(50 * DefaultDisplacedGrace); !has(got) && time.Now().Before(deadline); {
			time.Sleep(DefaultDisplacedGrace / 10)
			w.waitRounds(t, 1)
			if got, err = os.ReadFile(path); err != nil {
				t.Fatal(err)
			}
		}
		if !has(got) {
			t.Fatalf("step %d: the writer's edit (%s) was lost:\n%s", i, []string{"rename", "in place", "append", "truncate and write"}[k], got)
		}
		for _, l := range appended {
			if !bytes.Contains(got, []byte(l)) {
				t.Fatalf("step %d: appended line %q lost:\n%s", i, l, got)
			}
		}
		if _, err := v1alpha1.ParseManifest("t.yaml", got); err != nil {
			var syn *v1alpha1.SyntaxError
			if errors.As(err, &syn) {
				t.Fatalf("step %d: file unparseable: %v", i, err)
			}
		}
		if !bytes.Contains(got, []byte("status:\n  phase: Running")) {
			t.Fatalf("step %d: no status after two write-back rounds:\n%s", i, got)
		}
	}
	w.halt()
	w.check(t)
	t.Logf("writers: %v", kinds)
	logStats(t, sp)
}
