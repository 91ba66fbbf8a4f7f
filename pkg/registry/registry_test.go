package registry

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakePID starts the PIDs of the claims that goroutines of this process
// make: above pid_max, so no real process has them.
const fakePID = 5_000_000

// TestMain doubles as the claim holder of TestKilledHolderIsStale: run
// with REGISTRY_TEST_HOLDER=1, the test binary registers a claim for
// REGISTRY_TEST_SPOOL, says "ready" and holds it until its stdin closes.
func TestMain(m *testing.M) {
	if os.Getenv("REGISTRY_TEST_HOLDER") == "1" {
		h, err := Acquire(Claim{Spools: []string{os.Getenv("REGISTRY_TEST_SPOOL")}, Command: "holder"}, 8*gib)
		if err != nil {
			fmt.Fprintln(os.Stderr, "holder:", err)
			os.Exit(1)
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = h.Release()
		os.Exit(0)
	}
	// The tests play several controllers in one process, with fake
	// PIDs: the kernel would name this process as every lock's holder.
	// TestTheKernelSaysWhoHoldsAClaim puts the real one back.
	lockHolder = func(*syscall.Stat_t) int { return 0 }
	os.Exit(m.Run())
}

// useDir points the registry at a new directory for the test.
func useDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	return dir
}

func acquire(t *testing.T, c Claim, memory int64) *Held {
	t.Helper()
	h, err := Acquire(c, memory)
	if err != nil {
		t.Fatalf("Acquire(pid %d): %v", c.PID, err)
	}
	t.Cleanup(func() { _ = h.Release() })
	return h
}

func busyWith(t *testing.T, err error, pid int) *BusyError {
	t.Helper()
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Other.PID != pid {
		t.Fatalf("err = %v, want a *BusyError naming pid %d", err, pid)
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(pid)+" ") {
		t.Errorf("error %q does not name pid %d", err, pid)
	}
	return busy
}

func livePIDs(t *testing.T) []int {
	t.Helper()
	live, err := Live()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, c := range live {
		pids = append(pids, c.PID)
	}
	return pids
}

func TestEnvSelectsDir(t *testing.T) {
	t.Setenv(EnvDir, "")
	if got := Dirs(); !slices.Equal(got, []string{PrimaryDir, FallbackDir}) {
		t.Errorf("Dirs() without %s = %v", EnvDir, got)
	}
	dir := filepath.Join(t.TempDir(), "run")
	t.Setenv(EnvDir, dir)
	if got := Dirs(); !slices.Equal(got, []string{dir}) {
		t.Errorf("Dirs() = %v, want [%s]", got, dir)
	}
	h := acquire(t, Claim{Spools: []string{"/spool"}}, 8*gib)
	if want := filepath.Join(dir, "controller-"+strconv.Itoa(os.Getpid())+".json"); h.Path() != want {
		t.Errorf("Path() = %s, want %s", h.Path(), want)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() & (fs.ModePerm | fs.ModeSticky); got != 0o777|fs.ModeSticky {
		t.Errorf("created directory mode %v, want sticky 0777", got)
	}
	if fi, err := os.Stat(h.Path()); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("claim file: %v, %v; want mode 0644", fi, err)
	}
	c := h.Claim()
	if c.PID != os.Getpid() || c.UID != os.Getuid() || c.Started.IsZero() || !slices.Equal(c.Spools, []string{"/spool"}) {
		t.Errorf("Claim() = %+v", c)
	}
	if got := livePIDs(t); !slices.Equal(got, []int{os.Getpid()}) {
		t.Errorf("Live PIDs = %v", got)
	}
}

func TestOneOfManyWins(t *testing.T) {
	useDir(t)
	const n = 16
	helds := make([]*Held, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			helds[i], errs[i] = Acquire(Claim{PID: fakePID + i, Spools: []string{fmt.Sprint("/spool/", i)}}, 8*gib)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("both %d and %d acquired", fakePID+winner, fakePID+i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("none acquired: %v", errors.Join(errs...))
	}
	for i, err := range errs {
		if i != winner {
			busyWith(t, err, fakePID+winner)
		}
	}
	if err := helds[winner].Release(); err != nil {
		t.Fatal(err)
	}
	if err := helds[winner].Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := os.Stat(helds[winner].Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("claim file after Release: %v", err)
	}
	acquire(t, Claim{PID: fakePID + n, Spools: []string{"/spool/new"}}, 8*gib)
}

func TestKilledHolderIsStale(t *testing.T) {
	dir := useDir(t)
	spool := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REGISTRY_TEST_HOLDER=1", "REGISTRY_TEST_SPOOL="+spool)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}
	child := cmd.Process.Pid

	_, err = Acquire(Claim{PID: fakePID, Spools: []string{spool}}, 8*gib)
	busy := busyWith(t, err, child)
	if !strings.Contains(busy.Reason, "already served") || !slices.Equal(busy.Other.Spools, []string{spool}) {
		t.Errorf("same spool: %v", err)
	}
	_, err = Acquire(Claim{PID: fakePID, Spools: []string{"/elsewhere"}}, 8*gib)
	busyWith(t, err, child)
	if got := livePIDs(t); !slices.Equal(got, []int{child}) {
		t.Errorf("Live PIDs = %v, want [%d]", got, child)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // reaped: its descriptors, and so its flock, are gone
	claimFile := filepath.Join(dir, "controller-"+strconv.Itoa(child)+".json")
	if got := livePIDs(t); len(got) != 0 {
		t.Errorf("Live PIDs after kill = %v, want none", got)
	}
	acquire(t, Claim{PID: fakePID, Spools: []string{spool}}, 8*gib)
	if _, err := os.Lstat(claimFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale claim %s after Acquire: %v", claimFile, err)
	}
	if got := livePIDs(t); !slices.Equal(got, []int{fakePID}) {
		t.Errorf("Live PIDs = %v, want [%d]", got, fakePID)
	}
}

func TestShare(t *testing.T) {
	useDir(t)
	shared := func(i int, capacity int64) Claim {
		return Claim{PID: fakePID + i, Spools: []string{fmt.Sprint("/spool/", i)}, Share: true, MemoryCapacity: capacity}
	}
	acquire(t, shared(1, 3*gib), 8*gib)
	second := acquire(t, shared(2, 4*gib), 8*gib)
	_, err := Acquire(shared(3, 2*gib), 8*gib)
	busyWith(t, err, fakePID+2)
	want := "pid 5000001 declared 3 GiB, pid 5000002 declared 4 GiB, this one asks 2 GiB, the machine has 8 GiB"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q\nlacks %q", err, want)
	}
	if _, err := Acquire(Claim{PID: fakePID + 3, Spools: []string{"/spool/3"}}, 8*gib); err == nil {
		t.Error("a controller that does not share was accepted beside shared ones")
	}
	if _, err := Acquire(Claim{PID: fakePID + 3, Share: true}, 8*gib); !errors.Is(err, ErrShareNeedsCapacity) {
		t.Errorf("share without capacity: %v", err)
	}
	_ = second.Release()
	acquire(t, shared(3, 2*gib), 8*gib)
}

func TestServing(t *testing.T) {
	useDir(t)
	real, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(real, "state"), 0o700); err != nil {
		t.Fatal(err)
	}
	h := acquire(t, Claim{PID: fakePID, Spools: []string{link + "/"}, StateDirs: map[string]string{link: link + "/state"}}, 8*gib)
	if c := h.Claim(); !slices.Equal(c.Spools, []string{real}) || c.StateDirs[real] != real+"/state" {
		t.Errorf("claim not resolved: %+v", c)
	}
	for _, spool := range []string{real, link, link + "/../link"} {
		c, ok, err := Serving(spool)
		if err != nil || !ok || c.PID != fakePID {
			t.Errorf("Serving(%s) = %+v, %v, %v", spool, c, ok, err)
		}
	}
	if c, ok, err := Serving(t.TempDir()); ok || err != nil {
		t.Errorf("Serving(unserved) = %+v, %v, %v", c, ok, err)
	}
	_ = h.Release()
	if _, ok, err := Serving(real); ok || err != nil {
		t.Errorf("Serving after Release = %v, %v", ok, err)
	}
}

func TestUnreadableLockedClaimIsAlive(t *testing.T) {
	dir := useDir(t)
	path := filepath.Join(dir, "controller-5000077.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	live, err := Live()
	if err != nil || len(live) != 1 || live[0].PID != 5000077 || live[0].UID != os.Getuid() {
		t.Fatalf("Live = %+v, %v", live, err)
	}
	_, err = Acquire(Claim{PID: fakePID, Spools: []string{"/spool"}}, 8*gib)
	busyWith(t, err, 5000077)
	_ = f.Close()
	acquire(t, Claim{PID: fakePID, Spools: []string{"/spool"}}, 8*gib)
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale unreadable claim after Acquire: %v", err)
	}
}

func TestSamePIDTwice(t *testing.T) {
	useDir(t)
	first := acquire(t, Claim{PID: fakePID, Spools: []string{"/a"}}, 8*gib)
	second := acquire(t, Claim{PID: fakePID, Spools: []string{"/b"}}, 8*gib)
	if first.Path() == second.Path() {
		t.Fatalf("both claims at %s", first.Path())
	}
	_ = first.Release()
	if _, err := os.Stat(second.Path()); err != nil {
		t.Errorf("releasing one claim of a PID removed the other: %v", err)
	}
	if got := livePIDs(t); !slices.Equal(got, []int{fakePID}) {
		t.Errorf("Live PIDs = %v", got)
	}
}

func TestUnsafeDirRefused(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{open: "without the sticky bit", link: "is a symlink"}
	if os.Geteuid() == 0 {
		foreign := filepath.Join(base, "foreign")
		if err := os.Mkdir(foreign, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(foreign, 12345, 12345); err != nil {
			t.Fatal(err)
		}
		cases[foreign] = "owned by uid 12345"
	}
	for dir, why := range cases {
		t.Setenv(EnvDir, dir)
		_, err := Acquire(Claim{PID: fakePID, Spools: []string{"/spool"}}, 8*gib)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("Acquire in %s: %v, want an error saying %q", dir, err, why)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: wrote %v", dir, entries)
		}
	}
	// Readers skip a symlink rather than fail.
	t.Setenv(EnvDir, link)
	if live, err := Live(); len(live) != 0 || err != nil {
		t.Errorf("Live through a symlink = %v, %v", live, err)
	}
}

func TestFallback(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fallback := filepath.Join(base, "fallback")
	got, err := firstUsable([]string{filepath.Join(file, "primary"), fallback})
	if err != nil || got != fallback {
		t.Fatalf("firstUsable = %q, %v; want %s", got, err, fallback)
	}
	_, err = firstUsable([]string{filepath.Join(file, "primary")})
	if err == nil || !strings.Contains(err.Error(), "no registry directory") {
		t.Errorf("no usable directory: %v", err)
	}
}

func TestLeftoverTempRemoved(t *testing.T) {
	dir := useDir(t)
	tmp := filepath.Join(dir, tempPrefix+"123")
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	acquire(t, Claim{PID: fakePID, Spools: []string{"/spool"}}, 8*gib)
	if _, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("abandoned temporary file after Acquire: %v", err)
	}
}

// Update declares a spool found later: Serving finds it, the claim stays
// live (a new Acquire is still refused), and many readers meanwhile never
// see the claim missing or half written.
func TestUpdateAddsASpool(t *testing.T) {
	useDir(t)
	first, later := t.TempDir(), t.TempDir()
	h := acquire(t, Claim{PID: fakePID, Spools: []string{first}}, 8*gib)
	defer h.Release()
	stop := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, ok, err := Serving(first); !ok || err != nil {
				errs <- fmt.Errorf("Serving(first) during an update = %v, %v", ok, err)
				return
			}
		}
	}()
	for range 50 {
		if err := h.Update([]string{first, later}, nil); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-errs; err != nil {
		t.Error(err)
	}
	if c, ok, err := Serving(later); !ok || err != nil || c.PID != fakePID {
		t.Errorf("Serving(later) = %+v, %v, %v", c, ok, err)
	}
	if _, err := Acquire(Claim{PID: fakePID + 1, Spools: []string{t.TempDir()}}, 8*gib); !errors.As(err, new(*BusyError)) {
		t.Errorf("Acquire beside an updated claim: %v, want a BusyError", err)
	}
	_ = h.Release()
	if _, ok, _ := Serving(later); ok {
		t.Error("Serving after Release still finds the claim")
	}
}

// A claim says who holds it, but the kernel decides: its user is the
// file's owner and its PID the holder of its lock, whatever its JSON
// says (anyone may write a file in the registry).
func TestTheKernelSaysWhoHoldsAClaim(t *testing.T) {
	dir := useDir(t)
	lockHolder = flockHolder
	t.Cleanup(func() { lockHolder = func(*syscall.Stat_t) int { return 0 } })
	forged := filepath.Join(dir, "controller-1.json")
	f, err := os.OpenFile(forged, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(`{"pid":1,"uid":0,"user":"root","spools":["/x"]}`); err != nil {
		t.Fatal(err)
	}
	if err := f.Chown(4343, 4343); err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	live, err := Live()
	if err != nil || len(live) != 1 {
		t.Fatalf("Live = %+v, %v", live, err)
	}
	if c := live[0]; c.PID != os.Getpid() || c.UID != 4343 {
		t.Errorf("a claim written as pid 1, uid 0 by uid 4343 from pid %d reads as pid %d uid %d", os.Getpid(), c.PID, c.UID)
	}
	// A socket, a directory where the lock goes: skipped, never fatal.
	if err := os.Mkdir(filepath.Join(dir, "controller-2.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Live(); err != nil {
		t.Errorf("Live beside a directory named as a claim: %v", err)
	}
}

// A registry lock held forever (anyone may open it) delays a start; it
// does not stop it: the claim is published, then checked against the
// others.
func TestAHeldRegistryLockOnlyDelays(t *testing.T) {
	dir := useDir(t)
	defer func(w time.Duration) { lockWait = w }(lockWait)
	lockWait = 100 * time.Millisecond
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	h, err := Acquire(Claim{PID: fakePID, Spools: []string{t.TempDir()}}, 8*gib)
	if err != nil {
		t.Fatalf("Acquire with the registry lock held by someone: %v", err)
	}
	defer h.Release()
	if _, err := Acquire(Claim{PID: fakePID + 1, Spools: []string{t.TempDir()}}, 8*gib); !errors.As(err, new(*BusyError)) {
		t.Errorf("a second Acquire with the lock held: %v, want a BusyError", err)
	}
}
