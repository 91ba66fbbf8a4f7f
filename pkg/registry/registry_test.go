package registry

import (
	"bufio"
	"context"
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
	lockHolder = fakeHolder
	os.Exit(m.Run())
}

// fakeHolder says that the process a claim names holds it, runs as the
// file's owner and is a controller.
func fakeHolder(st *syscall.Stat_t, named int) holder {
	return holder{pid: named, uid: int(st.Uid), controller: true}
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
	standard := []string{PrimaryDir, UsersDir, FallbackDir}
	if got := Dirs(); !slices.Equal(got, standard) {
		t.Errorf("Dirs() without %s = %v", EnvDir, got)
	}
	dir := filepath.Join(t.TempDir(), "run")
	t.Setenv(EnvDir, dir)
	// Root (the test suite) isolates itself; for any other user the
	// standard directories are read all the same: the system service's
	// claim is seen by every user's controller.
	if got := dirsFor(dir, 0); !slices.Equal(got, []string{dir}) {
		t.Errorf("Dirs() for root = %v, want [%s]", got, dir)
	}
	if got := dirsFor(dir, 4242); !slices.Equal(got, append([]string{dir}, standard...)) {
		t.Errorf("Dirs() for uid 4242 = %v, want %s then the standard ones", got, dir)
	}
	if got := dirsFor(PrimaryDir, 4242); !slices.Equal(got, standard) {
		t.Errorf("Dirs() for uid 4242 with %s = %v, want the standard ones once", PrimaryDir, got)
	}
	if got := registerPlaces(0); len(got) != 1 || got[0].dir != dir {
		t.Errorf("registerPlaces with %s = %+v, want %s alone", EnvDir, got, dir)
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
	got, err := firstUsable([]place{{dir: filepath.Join(file, "primary")}, {dir: fallback}})
	if err != nil || got.dir != fallback {
		t.Fatalf("firstUsable = %q, %v; want %s", got.dir, err, fallback)
	}
	_, err = firstUsable([]place{{dir: filepath.Join(file, "primary")}})
	if err == nil || !strings.Contains(err.Error(), "no registry directory") {
		t.Errorf("no usable directory: %v", err)
	}
	// The users' directory is used where root made it, never made.
	users := filepath.Join(base, "users")
	if got, err := firstUsable([]place{{dir: users, noCreate: true}, {dir: fallback}}); err != nil || got.dir != fallback {
		t.Errorf("firstUsable with no users' directory = %q, %v; want %s", got.dir, err, fallback)
	}
	if _, err := os.Lstat(users); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the users' directory was made: %v", err)
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
// file's owner and it counts only while its lock is held by the process
// it names, of that user, running a controller (anyone may write a file in
// a registry directory and lock it).
func TestTheKernelSaysWhoHoldsAClaim(t *testing.T) {
	dir := useDir(t)
	lockHolder = flockHolder
	t.Cleanup(func() { lockHolder = fakeHolder })
	write := func(name, body string, uid int) *os.File {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		if _, err := f.WriteString(body); err != nil {
			t.Fatal(err)
		}
		if err := f.Chown(uid, uid); err != nil {
			t.Fatal(err)
		}
		return f
	}
	lock := func(f *os.File) {
		t.Helper()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatal(err)
		}
	}
	me := os.Getpid()
	// Named as root's, written by uid 4343, locked by this process (not
	// of uid 4343): ignored.
	lock(write("controller-1.json", `{"pid":1,"uid":0,"user":"root","spools":["/x"]}`, 4343))
	// Naming pid 1, locked by this process: not the process it names.
	lock(write("controller-2.json", `{"pid":1,"spools":["/y"]}`, os.Getuid()))
	// A lock taken by flock(1), naming flock's own pid: not a controller.
	forged := filepath.Join(dir, "controller-3.json")
	flock := exec.Command("flock", "--exclusive", forged, "sh", "-c", "echo locked; exec cat")
	stdin, err := flock.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := flock.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := flock.Start(); err != nil {
		t.Fatalf("flock (util-linux): %v", err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = flock.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("flock: %q, %v", line, err)
	}
	if err := os.WriteFile(forged, fmt.Appendf(nil, `{"pid":%d,"spools":["/z"]}`, flock.Process.Pid), 0o644); err != nil {
		t.Fatal(err)
	}
	if live, err := Live(); err != nil || len(live) != 0 {
		t.Fatalf("Live = %+v, %v; want none of the forged claims", live, err)
	}
	// None of them keeps a controller from starting, and none is removed.
	h := acquire(t, Claim{Spools: []string{"/spool"}}, 8*gib)
	for _, name := range []string{"controller-1.json", "controller-2.json", "controller-3.json"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// This process's own claim, locked by it, a controller (the same
	// executable): live, with the user the file's owner says.
	live, err := Live()
	if err != nil || len(live) != 1 || live[0].PID != me || live[0].UID != os.Getuid() || live[0].Spools[0] != "/spool" {
		t.Fatalf("Live = %+v, %v; want this process's claim alone", live, err)
	}
	_ = h.Release()
	// A socket, a directory where the lock goes: skipped, never fatal.
	if err := os.Mkdir(filepath.Join(dir, "controller-4.json"), 0o755); err != nil {
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

// The system's directory is root's, mode 0755, with the users' directory
// (1777) in it; one of the older layout (1777) is made 0755, and its lock
// is root's alone: one a user left there is replaced, so that no user can
// hold it.
func TestTheSystemsDirectoryIsRootsAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root's directory: run as root (CI does)")
	}
	modeOf := func(p string) (fs.FileMode, uint32) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode() & (fs.ModePerm | fs.ModeSticky), fi.Sys().(*syscall.Stat_t).Uid
	}
	sys := filepath.Join(t.TempDir(), "lardon3d")
	if err := prepareSystem(sys); err != nil {
		t.Fatal(err)
	}
	if m, uid := modeOf(sys); m != 0o755 || uid != 0 {
		t.Errorf("system directory: mode %v uid %d, want 0755 root", m, uid)
	}
	if m, _ := modeOf(filepath.Join(sys, "users")); m != 0o777|fs.ModeSticky {
		t.Errorf("users' directory: mode %v, want sticky 0777", m)
	}
	// The older layout: world-writable, a user's lock planted in it.
	if err := os.Chmod(sys, 0o777|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(sys, lockName)
	if err := os.WriteFile(planted, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(planted, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := prepareSystem(sys); err != nil {
		t.Fatal(err)
	}
	if m, _ := modeOf(sys); m != 0o755 {
		t.Errorf("older layout's directory: mode %v, want 0755", m)
	}
	h, err := acquireIn(place{dir: sys, system: true}, []string{sys}, normalize(Claim{PID: fakePID, Spools: []string{"/spool"}}), 8*gib)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if m, uid := modeOf(planted); m != 0o600 || uid != 0 {
		t.Errorf("system's lock: mode %v uid %d, want 0600 root", m, uid)
	}
	// A symlink or a user's directory in its place is refused.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(sys, link); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(t.TempDir(), "foreign")
	if err := os.Mkdir(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(foreign, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{link, foreign} {
		if err := prepareSystem(d); err == nil {
			t.Errorf("prepareSystem(%s) = nil, want a refusal", d)
		}
	}
}

// A user's controller learns that root's has registered: Displaced yields
// root's claim; root's own is never displaced.
func TestAUsersControllerIsDisplacedByRoots(t *testing.T) {
	useDir(t)
	// This test's claims play a user's controller (uid 4242) and root's.
	user := acquire(t, Claim{PID: fakePID, Spools: []string{"/u"}}, 8*gib)
	if err := os.Chown(user.Path(), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	user.claim.UID = 4242
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	displaced := user.Displaced(ctx, 10*time.Millisecond)
	select {
	case c := <-displaced:
		t.Fatalf("displaced by %+v before root's controller runs", c)
	case <-time.After(50 * time.Millisecond):
	}
	root := acquire(t, Claim{PID: fakePID + 1, Spools: []string{"/r"}}, 8*gib)
	if b := root.Beside(); len(b) != 1 || b[0].PID != fakePID || b[0].UID != 4242 {
		t.Errorf("Beside = %+v, want the user's controller", b)
	}
	if c, ok := <-displaced; !ok || c.PID != fakePID+1 {
		t.Errorf("Displaced = %+v, %v; want root's claim", c, ok)
	}
	rootCtx, rootCancel := context.WithCancel(context.Background())
	rootWatch := root.Displaced(rootCtx, 10*time.Millisecond)
	rootCancel()
	if c, ok := <-rootWatch; ok {
		t.Errorf("root's controller displaced by %+v", c)
	}
}
