package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

const waitFor = 5 * time.Second

func manifest(cmd string) string {
	return "apiVersion: lardon3d.io/v1alpha1\nkind: Task\n# user comment\nspec:\n  command: [echo, " + cmd + "]\n  items: {count: 1}\n"
}

// harness runs a Spool on a fresh directory with a fake clock.
type harness struct {
	t     *testing.T
	dir   string
	sp    *Spool
	clock *clocktesting.FakeClock
	// synced is set once the Synced event was seen.
	synced bool
}

func newHarness(t *testing.T, setup func(dir string)) *harness {
	t.Helper()
	dir := t.TempDir()
	if setup != nil {
		setup(dir)
	}
	fc := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
	lg := zerolog.New(zerolog.NewTestWriter(t))
	sp, err := Open(dir, Options{Clock: fc, Settle: 300 * time.Millisecond, Logger: lg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		sp.Close()
	})
	h := &harness{t: t, dir: dir, sp: sp, clock: fc}
	if setup == nil {
		h.expect(Synced, "") // an empty spool is listed at once
	}
	return h
}

func (h *harness) path(name string) string { return filepath.Join(h.dir, name) }

// write replaces a file atomically, the way editors do.
func (h *harness) write(name, content string) {
	h.t.Helper()
	tmp := filepath.Join(h.dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, h.path(name)); err != nil {
		h.t.Fatal(err)
	}
}

// expect returns the next event and fails unless it is typ for name. The
// one Synced event is passed over unless asked for.
func (h *harness) expect(typ EventType, name string) Event {
	h.t.Helper()
	for {
		select {
		case ev := <-h.sp.Events():
			if ev.Type == Synced && typ != Synced {
				if h.synced {
					h.t.Fatalf("a second Synced event")
				}
				h.synced = true
				continue
			}
			if ev.Type != typ || ev.Name != name {
				h.t.Fatalf("got %v %s (err %v), want %v %s", ev.Type, ev.Name, ev.Err, typ, name)
			}
			return ev
		case <-time.After(waitFor):
			h.t.Fatalf("no event after %v, want %v %s", waitFor, typ, name)
		}
		return Event{}
	}
}

// barrier writes a new manifest and waits for its Added: every event due
// before it has been received by then, so expect fails on any stray event.
func (h *harness) barrier(name string) {
	h.t.Helper()
	h.write(name+".yaml", manifest(name))
	h.expect(Added, name)
}

// waitSettleTimer waits until the watcher armed its settle timer (the
// relist timer is the other waiter).
func (h *harness) waitSettleTimer() {
	h.t.Helper()
	deadline := time.Now().Add(waitFor)
	for h.clock.Waiters() < 2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			h.t.Fatalf("settle timer never armed\n%s", buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSyncedFollowsTheFirstListing(t *testing.T) {
	h := newHarness(t, func(dir string) {
		for _, n := range []string{"a", "b", "c"} {
			if err := os.WriteFile(filepath.Join(dir, n+".yaml"), []byte(manifest(n)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		// Broken and quiet for longer than the settle period: judged at once.
		if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("spec: [unclosed\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-time.Minute)
		if err := os.Chtimes(filepath.Join(dir, "broken.yaml"), old, old); err != nil {
			t.Fatal(err)
		}
	})
	seen := map[string]EventType{}
	for len(seen) < 4 {
		select {
		case ev := <-h.sp.Events():
			if ev.Type == Synced {
				t.Fatalf("Synced after %v, before every manifest present at start", seen)
			}
			seen[ev.Name] = ev.Type
		case <-time.After(waitFor):
			t.Fatalf("only %v after %v", seen, waitFor)
		}
	}
	if seen["broken"] != Invalid || seen["a"] != Added {
		t.Fatalf("events %v", seen)
	}
	h.expect(Synced, "")
}

func TestOpenRefusesSharedDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrSharedSpool) || !strings.Contains(err.Error(), "--allow-shared-spool") || !strings.Contains(err.Error(), "0775") {
		t.Fatalf("Open = %v; want ErrSharedSpool naming the mode and the flag", err)
	}
	if _, err := Open(dir, Options{AllowShared: true}); err != nil {
		t.Fatalf("Open with AllowShared: %v", err)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := Open(missing, Options{}); err == nil {
		t.Fatal("Open of a missing directory succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open created %s", missing)
	}
}

func TestWatchAddModifyDelete(t *testing.T) {
	h := newHarness(t, func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifest("a")), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	ev := h.expect(Added, "a")
	if ev.Task == nil || ev.Err != nil || ev.Path != h.path("a.yaml") || string(ev.Data) != manifest("a") {
		t.Fatalf("initial list: %+v", ev)
	}
	h.write("b.yml", manifest("b"))
	h.expect(Added, "b")

	h.write("a.yaml", manifest("a2"))
	ev = h.expect(Modified, "a")
	if got := ev.Task.Spec.Command; len(got) != 2 || got[1] != "a2" {
		t.Fatalf("Modified carries %v", got)
	}

	// Unchanged content and our own status write-back emit nothing.
	h.write("a.yaml", manifest("a2"))
	if err := h.sp.WriteStatus(h.path("a.yaml"), &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning}); err != nil {
		t.Fatal(err)
	}
	if err := h.sp.WriteStatus(h.path("a.yaml"), &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseDone}); err != nil {
		t.Fatal(err)
	}
	// Files that are not manifests are ignored.
	for _, n := range []string{".a.yaml.swp", "a.yaml~", ".#a.yaml", "4913", "notes.txt", ".hidden.yaml", "README"} {
		if err := os.WriteFile(h.path(n), []byte(manifest(n)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	h.barrier("c")

	got, err := os.ReadFile(h.path("a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := manifest("a2") + "status:\n  phase: Done\n"; !strings.HasPrefix(string(got), want) {
		t.Fatalf("after write-back:\n%s\nwant prefix\n%s", got, want)
	}

	// A deletion is reported once its grace period is over.
	if err := os.Remove(h.path("a.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitSettleTimer() // the deletion timer
	select {
	case ev := <-h.sp.Events():
		t.Fatalf("deletion reported before its grace period: %v %s", ev.Type, ev.Name)
	default:
	}
	h.clock.Step(DefaultDeleteGrace)
	ev = h.expect(Deleted, "a")
	if ev.Path != h.path("a.yaml") || ev.Task != nil {
		t.Fatalf("Deleted: %+v", ev)
	}
}

// TestWatchMidWrite: a file still open for writing is not read, even when
// what it holds so far parses; once closed, the whole of it is emitted.
func TestWatchMidWrite(t *testing.T) {
	h := newHarness(t, nil)
	full := manifest("x") + "  dependsOn: [never-done]\n# tail comment\n"
	head := manifest("x") // a complete Task on its own
	f, err := os.Create(h.path("m.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(head); err != nil {
		t.Fatal(err)
	}
	// The barrier's events come after m.yaml's creation and write: had
	// m.yaml been read, its Added would come first and fail expect.
	h.barrier("z")
	if _, err := f.WriteString(full[len(head):]); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ev := h.expect(Added, "m")
	if string(ev.Data) != full || len(ev.Task.Spec.DependsOn) != 1 {
		t.Fatalf("emitted %q", ev.Data)
	}
	h.barrier("z2")
}

// TestWatchInvalidNeverRewritten: an unparseable file becomes Invalid only
// after the settle period, and write-back refuses it and leaves it as is.
func TestWatchInvalidNeverRewritten(t *testing.T) {
	h := newHarness(t, nil)
	broken := "kind: Task\nspec: [a,\n# keep me\n"
	h.write("bad.yaml", broken)
	h.waitSettleTimer()
	select {
	case ev := <-h.sp.Events():
		t.Fatalf("judged before settling: %v", ev.Type)
	default:
	}
	h.clock.Step(time.Second)
	ev := h.expect(Invalid, "bad")
	var syn *v1alpha1.SyntaxError
	if !errors.As(ev.Err, &syn) || ev.Task != nil {
		t.Fatalf("Invalid: task %v err %v", ev.Task, ev.Err)
	}
	err := h.sp.WriteStatus(h.path("bad.yaml"), &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRejected})
	if !errors.Is(err, ErrNotRewritable) {
		t.Fatalf("WriteStatus on an unparseable file: %v", err)
	}
	if got, _ := os.ReadFile(h.path("bad.yaml")); string(got) != broken {
		t.Fatalf("unparseable file changed: %q", got)
	}
	// Fixing it is picked up.
	h.write("bad.yaml", manifest("fixed"))
	h.expect(Added, "bad")
}

func TestWatchRefusesLargeFile(t *testing.T) {
	h := newHarness(t, nil)
	big := manifest("big") + "# " + strings.Repeat("x", DefaultMaxFileSize) + "\n"
	h.write("big.yaml", big)
	ev := h.expect(Refused, "big")
	if !errors.Is(ev.Err, ErrTooLarge) || !strings.Contains(ev.Err.Error(), "1048576") {
		t.Fatalf("Refused: %v", ev.Err)
	}
	h.barrier("after")
	if err := os.Remove(h.path("big.yaml")); err != nil {
		t.Fatal(err)
	}
	h.expect(Deleted, "big")
}

func TestWatchSymlinks(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.yaml")
	if err := os.WriteFile(outside, []byte(manifest("out")), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, nil)
	if err := os.Symlink(outside, h.path("out.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.path(".real"), []byte(manifest("in")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".real", h.path("in.yaml")); err != nil {
		t.Fatal(err)
	}
	h.expect(Added, "in") // out.yaml came first and was ignored
	// Write-back through an inside symlink edits the target, keeps the link.
	if err := h.sp.WriteStatus(h.path("in.yaml"), &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseDone}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(h.path("in.yaml")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("symlink replaced: %v", err)
	}
	if got, _ := os.ReadFile(h.path(".real")); !bytes.Contains(got, []byte("phase: Done")) {
		t.Fatalf("target not written: %s", got)
	}
	h.barrier("z")
}

func TestWatchIgnoresOtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	h := newHarness(t, nil)
	tmp := h.path(".o")
	if err := os.WriteFile(tmp, []byte(manifest("o")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, h.path("o.yaml")); err != nil {
		t.Fatal(err)
	}
	h.barrier("z")
}

// TestWatchInvalidSpecIsEmitted: a parseable but invalid manifest is
// emitted at once with its Task and the validation error, for the
// reconciler to reject.
func TestWatchInvalidSpecIsEmitted(t *testing.T) {
	h := newHarness(t, nil)
	h.write("typo.yaml", strings.Replace(manifest("t"), "  items:", "  perltem: 1\n  items:", 1))
	ev := h.expect(Added, "typo")
	var syn *v1alpha1.SyntaxError
	if ev.Task == nil || ev.Err == nil || errors.As(ev.Err, &syn) {
		t.Fatalf("Added: task %v err %v", ev.Task != nil, ev.Err)
	}
	if !strings.Contains(ev.Err.Error(), "perltem") {
		t.Fatalf("error does not name the field: %v", ev.Err)
	}
}

// relistStepper opens a spool on dir with a watcher that is not running:
// step relists once, as if fsnotify had dropped every event, and returns
// the events emitted.
func relistStepper(t *testing.T, dir string, fc *clocktesting.FakeClock) (*watcher, func() []Event) {
	t.Helper()
	sp, err := Open(dir, Options{Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	w := &watcher{s: sp, files: map[string]*fileState{}, timed: map[string]struct{}{}}
	return w, func() []Event {
		if !w.relist(context.Background()) {
			t.Fatal("relist stopped")
		}
		var evs []Event
		for {
			select {
			case ev := <-sp.events:
				evs = append(evs, ev)
			default:
				return evs
			}
		}
	}
}

// TestRelistStep drives the watcher's relist step directly, as if fsnotify
// had dropped every event: the relist alone finds additions, edits and
// deletions, and emits nothing for an unchanged directory.
func TestRelistStep(t *testing.T) {
	dir := t.TempDir()
	fc := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
	w, step := relistStepper(t, dir, fc)
	ctx := context.Background()
	path := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(path, []byte(manifest("1")), 0o600); err != nil {
		t.Fatal(err)
	}
	if evs := step(); len(evs) != 1 || evs[0].Type != Added {
		t.Fatalf("after create: %v", evs)
	}
	if evs := step(); len(evs) != 0 {
		t.Fatalf("unchanged directory emitted %v", evs)
	}
	if err := os.WriteFile(path, []byte(manifest("2")), 0o600); err != nil {
		t.Fatal(err)
	}
	if evs := step(); len(evs) != 1 || evs[0].Type != Modified {
		t.Fatalf("after edit: %v", evs)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if evs := step(); len(evs) != 0 {
		t.Fatalf("deletion reported before its grace period: %v", evs)
	}
	fc.Step(DefaultDeleteGrace)
	if !w.settle(ctx) {
		t.Fatal("settle stopped")
	}
	if evs := step(); len(evs) != 1 || evs[0].Type != Deleted || evs[0].Name != "r" {
		t.Fatalf("after delete: %v", evs)
	}
}

// openedNames reads the inotify events of fd (IN_OPEN on a directory) and
// returns the names of the files opened, the directory itself left out.
func openedNames(t *testing.T, fd int) []string {
	t.Helper()
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			if name != "" && ev.Mask&unix.IN_ISDIR == 0 {
				names = append(names, name)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// TestRelistOpensNoUnchangedFile: the periodic relist of a spool of
// manifests already read opens none of them (the kernel's IN_OPEN events
// say so): a stat shows each is the version last read. An edited one is
// opened and read again.
func TestRelistOpensNoUnchangedFile(t *testing.T) {
	dir := t.TempDir()
	_, step := relistStepper(t, dir, clocktesting.NewFakeClock(time.Unix(1700000000, 0)))
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("m%02d.yaml", i)), []byte(manifest(fmt.Sprintf("m%02d", i))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if evs := step(); len(evs) != 20 {
		t.Fatalf("first relist emitted %d events, want 20 Added", len(evs))
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	if evs := step(); len(evs) != 0 {
		t.Fatalf("unchanged spool emitted %v", evs)
	}
	if opened := openedNames(t, fd); len(opened) != 0 {
		t.Errorf("a relist of unchanged manifests opened %v", opened)
	}
	if err := os.WriteFile(filepath.Join(dir, "m07.yaml"), []byte(manifest("m07")+"# edited\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = openedNames(t, fd) // the test's own write
	if evs := step(); len(evs) != 1 || evs[0].Type != Modified {
		t.Fatalf("after an edit the relist emitted %v, want one Modified", evs)
	}
	if opened := openedNames(t, fd); len(opened) != 1 || opened[0] != "m07.yaml" {
		t.Errorf("after an edit the relist opened %v, want m07.yaml alone", opened)
	}
}

// TestPeriodicRelistFindsWhatNoEventNames: an edit no inotify event names
// (through a link to a dotfile, which the watcher ignores) is found by the
// periodic relist, and the relist comes back after each (its timer is
// re-armed, relistPeriod).
func TestPeriodicRelistFindsWhatNoEventNames(t *testing.T) {
	h := newHarness(t, nil)
	if err := os.WriteFile(h.path(".real"), []byte(manifest("in")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".real", h.path("in.yaml")); err != nil {
		t.Fatal(err)
	}
	h.expect(Added, "in")
	for i := range 3 {
		if err := os.WriteFile(h.path(".real"), []byte(manifest("in")+fmt.Sprintf("# edit %d\n", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		// The timer is re-armed once the relist before ends: step until
		// one fires.
		found := false
		for try := 0; try < 50 && !found; try++ {
			h.clock.Step(DefaultRelist)
			select {
			case ev := <-h.sp.Events():
				if ev.Type != Modified || ev.Name != "in" {
					t.Fatalf("edit %d: got %v %s, want Modified in", i, ev.Type, ev.Name)
				}
				found = true
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !found {
			t.Fatalf("edit %d through the link: no relist found it", i)
		}
	}
}

func TestRelistPeriod(t *testing.T) {
	for _, c := range []struct{ least, took, want time.Duration }{
		{10 * time.Second, 0, 10 * time.Second},
		{10 * time.Second, 5 * time.Millisecond, 10 * time.Second},
		{10 * time.Second, 20 * time.Millisecond, 10 * time.Second},
		{10 * time.Second, 60 * time.Millisecond, 30 * time.Second},
		{time.Second, 10 * time.Millisecond, 5 * time.Second},
	} {
		if got := relistPeriod(c.least, c.took); got != c.want {
			t.Errorf("relistPeriod(%v, %v) = %v, want %v", c.least, c.took, got, c.want)
		}
	}
}
