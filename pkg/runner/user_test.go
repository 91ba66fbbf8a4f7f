package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// noEntryUID is a uid without a passwd entry on the test machines.
const noEntryUID = 4242

// needRoot skips a test that changes credentials when the test process
// cannot (CI runs the suite as root).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to change credentials (CI runs as root)")
	}
}

func lookupUser(t *testing.T, uid, gid uint32) *User {
	t.Helper()
	u, err := LookupUser(uid, gid)
	if err != nil {
		t.Fatalf("LookupUser(%d, %d): %v", uid, gid, err)
	}
	return u
}

func noEntry(t *testing.T) {
	t.Helper()
	if _, err := user.LookupId("4242"); err == nil {
		t.Fatalf("uid %d has a passwd entry on this machine; the test needs one without", noEntryUID)
	}
}

// userSpec is testSpec for a batch run as u: the test's directories let
// the user through (0711) to the items file; shared is a directory it may
// write (0777).
func userSpec(t *testing.T, u *User, command ...string) (s Spec, shared string) {
	t.Helper()
	s = testSpec(t, command...)
	s.User = u
	base := filepath.Dir(s.LogPath)
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	shared = filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	return s, shared
}

func statT(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestLookupUser(t *testing.T) {
	noEntry(t)
	for _, tc := range []struct {
		uid, gid   uint32
		name, home string
		wantGID    uint32
	}{
		{0, 0, "root", "/root", 0},
		// The passwd entry's primary group, not the gid given.
		{65534, 1, "nobody", "/nonexistent", 65534},
		// No entry: the gid given, home "/", no name.
		{noEntryUID, 777, "", "/", 777},
	} {
		u := lookupUser(t, tc.uid, tc.gid)
		if u.UID != tc.uid || u.GID != tc.wantGID || u.Name != tc.name || u.Home != tc.home {
			t.Errorf("LookupUser(%d, %d) = %+v, want uid %d gid %d name %q home %q",
				tc.uid, tc.gid, u, tc.uid, tc.wantGID, tc.name, tc.home)
		}
		if len(u.Groups) == 0 || u.Groups[0] != tc.wantGID {
			t.Errorf("LookupUser(%d, %d) groups %v, want %d first", tc.uid, tc.gid, u.Groups, tc.wantGID)
		}
		if tc.name == "" && len(u.Groups) != 1 {
			t.Errorf("LookupUser(%d, %d) groups %v, want [%d] alone", tc.uid, tc.gid, u.Groups, tc.wantGID)
		}
	}
}

func TestBuildEnvUserVariables(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/root", "USER=root", "LOGNAME=root", "X=1"}
	for _, tc := range []struct {
		u    *User
		want []string
	}{
		{nil, []string{"PATH=/bin", "HOME=/root", "USER=root", "LOGNAME=root", "X=1"}},
		{&User{Name: "ann", Home: "/home/ann"}, []string{"PATH=/bin", "HOME=/home/ann", "USER=ann", "LOGNAME=ann", "X=1"}},
		{&User{Home: "/"}, []string{"PATH=/bin", "HOME=/", "X=1"}},
		{&User{}, []string{"PATH=/bin", "X=1"}},
	} {
		s := Spec{Task: "t", Command: []string{"true"}, Items: []string{"a"}, Threads: 1, User: tc.u}
		env, _, err := buildEnv(base, s, "/run/items")
		if err != nil {
			t.Fatal(err)
		}
		if got := env[:len(tc.want)]; !slices.Equal(got, tc.want) {
			t.Errorf("user %+v: environment starts %q, want %q", tc.u, got, tc.want)
		}
	}
}

func TestSwitchUserOnlyFromRoot(t *testing.T) {
	u := &User{UID: 1000, GID: 1000}
	for _, tc := range []struct {
		euid   int
		u      *User
		want   *User
		errors bool
	}{
		{0, nil, nil, false},
		{0, u, u, false},
		{0, &User{UID: 0, GID: 5}, &User{UID: 0, GID: 5}, false}, // root's gid and groups set too
		{1000, u, nil, false}, // itself: nothing to change
		{1001, u, nil, true},
	} {
		got, err := switchUserFrom(tc.u, tc.euid)
		if (err != nil) != tc.errors || (got == nil) != (tc.want == nil) || got != nil && got.UID != tc.want.UID {
			t.Errorf("euid %d, user %+v: %+v, %v", tc.euid, tc.u, got, err)
		}
		if err != nil && !errors.Is(err, ErrRunAsUser) {
			t.Errorf("euid %d: %v, want ErrRunAsUser", tc.euid, err)
		}
	}
}

func TestUserBatchRunsAsTheManifestOwner(t *testing.T) {
	needRoot(t)
	t.Setenv("USER", "root")
	t.Setenv("LOGNAME", "root")
	nobody := lookupUser(t, 65534, 65534)
	s, shared := userSpec(t, nobody)
	s.Command = []string{"sh", "-c",
		`id -u; id -g; id -G; echo "HOME=$HOME USER=$USER LOGNAME=$LOGNAME OWN=$OWN"; touch "$1/made"; cat "$LARDON3D_ITEMS_FILE"`,
		"sh", shared}
	s.Items = []string{"img/a b.jpg", "img/c.jpg"}
	s.Spares = NewSpares()
	s.Env = []EnvVar{{"OWN", "$(HOME)/x"}}
	b := start(t, s)
	res := b.Wait()
	log := readLog(t, s)
	if res.ExitCode != 0 || res.Reason != "" {
		t.Fatalf("result %+v, log:\n%s", res, log)
	}
	want := "\n65534\n65534\n65534\nHOME=/nonexistent USER=nobody LOGNAME=nobody OWN=/nonexistent/x\nimg/a b.jpg\nimg/c.jpg\n"
	if !strings.Contains(log, want) {
		t.Errorf("log lacks %q:\n%s", want, log)
	}
	if !strings.Contains(log, "runs as uid 65534 gid 65534 groups [65534] (nobody)") {
		t.Errorf("log does not say who the batch ran as:\n%s", log)
	}
	if strings.Contains(log, "out of its reach") {
		t.Errorf("the items file was reachable, the log says otherwise:\n%s", log)
	}
	if st := statT(t, filepath.Join(shared, "made")); st.Uid != 65534 || st.Gid != 65534 {
		t.Errorf("the file the batch made is owned by %d:%d, want 65534:65534", st.Uid, st.Gid)
	}
	// The pool file is the user's, in a run directory that stays root's.
	if st := statT(t, b.ItemsFile()); st.Uid != 65534 || st.Gid != 65534 || st.Mode&0o7777 != 0o600 {
		t.Errorf("items file %d:%d mode %#o, want 65534:65534 0600", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if st := statT(t, s.RunDir); st.Uid != 0 || st.Mode&0o7777 != 0o711 {
		t.Errorf("run directory %d mode %#o, want root's 0711", st.Uid, st.Mode&0o7777)
	}
	// The task's own environment still wins.
	s.Env = []EnvVar{{"HOME", "/tmp/own"}, {"USER", "own"}}
	s.Command = []string{"sh", "-c", `echo "HOME=$HOME USER=$USER"`}
	if res := start(t, s).Wait(); res.ExitCode != 0 || !strings.Contains(readLog(t, s), "\nHOME=/tmp/own USER=own\n") {
		t.Errorf("Spec.Env did not override the user's HOME and USER: %+v\n%s", res, readLog(t, s))
	}
}

func TestUserWithoutPasswdEntryRuns(t *testing.T) {
	needRoot(t)
	noEntry(t)
	t.Setenv("USER", "root")
	t.Setenv("LOGNAME", "root")
	u := lookupUser(t, noEntryUID, noEntryUID)
	s, _ := userSpec(t, u, "sh", "-c",
		`id -u; id -g; id -G; echo "HOME=$HOME USER=${USER-unset} LOGNAME=${LOGNAME-unset}"; cat "$LARDON3D_ITEMS_FILE"`)
	s.Items = []string{"only"}
	res := start(t, s).Wait()
	log := readLog(t, s)
	if res.ExitCode != 0 {
		t.Fatalf("result %+v, log:\n%s", res, log)
	}
	if want := "\n4242\n4242\n4242\nHOME=/ USER=unset LOGNAME=unset\nonly\n"; !strings.Contains(log, want) {
		t.Errorf("log lacks %q:\n%s", want, log)
	}
}

func TestUserGroupsAreExactlyTheUsers(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		groups []uint32
		want   string
	}{
		{[]uint32{4243, 4244}, "4243\n4243 4244\n"},
		{nil, "4243\n4243\n"}, // none: not root's
	} {
		s, _ := userSpec(t, &User{UID: noEntryUID, GID: 4243, Groups: tc.groups}, "sh", "-c", "id -g; id -G")
		if res := start(t, s).Wait(); res.ExitCode != 0 || !strings.Contains(readLog(t, s), "\n"+tc.want) {
			t.Errorf("groups %v: %+v, want %q in the log:\n%s", tc.groups, res, tc.want, readLog(t, s))
		}
	}
}

func TestUserCannotEscapeToRoot(t *testing.T) {
	needRoot(t)
	secretDir := t.TempDir()
	if err := os.Chmod(secretDir, 0o700); err != nil { // root's alone
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "secret"), []byte("s3cr3t\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, u := range []*User{lookupUser(t, 65534, 65534), lookupUser(t, noEntryUID, noEntryUID)} {
		s, _ := userSpec(t, u, "sh", "-c", `id -u; cat "$1/secret"; echo "cat=$?"; ls /root >/dev/null; echo "ls=$?"`, "sh", secretDir)
		res := start(t, s).Wait()
		log := readLog(t, s)
		if res.ExitCode != 0 {
			t.Fatalf("uid %d: %+v\n%s", u.UID, res, log)
		}
		if strings.Contains(log, "s3cr3t") || strings.Contains(log, "\ncat=0\n") || strings.Contains(log, "\nls=0\n") {
			t.Errorf("uid %d read what only root may:\n%s", u.UID, log)
		}
		if regexp.MustCompile(`(?m)^0$`).MatchString(log) || !strings.Contains(log, "\n"+strconv.FormatUint(uint64(u.UID), 10)+"\n") {
			t.Errorf("uid %d: id -u is not the user's:\n%s", u.UID, log)
		}
	}
}

func TestUserRunDirMustBeTheControllers(t *testing.T) {
	needRoot(t)
	nobody := lookupUser(t, 65534, 65534)
	for _, tc := range []struct {
		name    string
		prepare func(s *Spec) error
	}{
		{"writable by all", func(s *Spec) error { return unix.Chmod(s.RunDir, 0o777) }},
		{"the user's", func(s *Spec) error { return os.Chown(s.RunDir, 65534, 65534) }},
		{"sticky", func(s *Spec) error { return unix.Chmod(s.RunDir, 0o1777) }},
		{"under the user's", func(s *Spec) error {
			s.RunDir = filepath.Join(s.RunDir, "run")
			if err := os.Mkdir(s.RunDir, 0o700); err != nil {
				return err
			}
			return os.Chown(filepath.Dir(s.RunDir), 65534, 65534)
		}},
		{"with the log in one writable by all", func(s *Spec) error {
			s.LogPath = filepath.Join(s.RunDir, "task.log")
			return unix.Chmod(s.RunDir, 0o777)
		}},
	} {
		name := tc.name
		s, _ := userSpec(t, nobody, "true")
		if err := os.Mkdir(s.RunDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := tc.prepare(&s); err != nil {
			t.Fatal(err)
		}
		b, err := Start(context.Background(), s)
		if b != nil || !errors.Is(err, ErrRunAsUser) {
			t.Errorf("%s: Start = %v, %v; want ErrRunAsUser", name, b, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
		if ents, _ := os.ReadDir(s.RunDir); len(ents) != 0 {
			t.Errorf("%s: files written in the run directory: %v", name, ents)
		}
	}
	// Not reachable by the user: the batch runs, the log says why it may
	// not find its items.
	private := t.TempDir()
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	s := testSpec(t, "true")
	s.User, s.RunDir = nobody, filepath.Join(private, "run")
	if res := start(t, s).Wait(); res.ExitCode != 0 || !strings.Contains(readLog(t, s), "uid 65534 cannot enter ") {
		t.Errorf("%+v; the log does not say the items file is out of reach:\n%s", res, readLog(t, s))
	}
}

// TestUserPoolFilesStayWithTheirUser: a pool file is rewritten in place
// for batches of its user, claimed from root's, and never handed to
// another user (who may still hold it open): it is unlinked instead.
func TestUserPoolFilesStayWithTheirUser(t *testing.T) {
	needRoot(t)
	nobody := lookupUser(t, 65534, 65534)
	other := &User{UID: noEntryUID, GID: noEntryUID, Groups: []uint32{noEntryUID}, Home: "/"}
	s, _ := userSpec(t, nobody, "sh", "-c", `cat "$LARDON3D_ITEMS_FILE"`)
	s.Spares = NewSpares()
	type seen struct {
		path     string
		ino      uint64
		uid, gid uint32
	}
	run := func(u *User, item string) seen {
		t.Helper()
		s.User, s.Items = u, []string{item}
		b := start(t, s)
		if res := b.Wait(); res.ExitCode != 0 || !strings.Contains(readLog(t, s), "\n"+item+"\n") {
			t.Fatalf("batch %s: %+v\n%s", item, res, readLog(t, s))
		}
		st := statT(t, b.ItemsFile())
		return seen{b.ItemsFile(), st.Ino, st.Uid, st.Gid}
	}
	a := run(nobody, "first")
	if a.uid != 65534 {
		t.Fatalf("pool file %+v, want nobody's", a)
	}
	if b := run(nobody, "second"); b != a {
		t.Errorf("same user: %+v, want the pool file %+v rewritten", b, a)
	}
	c := run(nil, "root's") // the controller's own user
	if c.path == a.path || c.uid != 0 {
		t.Errorf("root's batch got %+v after nobody's %+v: want a new root file", c, a)
	}
	if _, err := os.Lstat(a.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nobody's pool file %s kept after it was refused: %v", a.path, err)
	}
	d := run(other, "other's") // root's file is claimed: fchown
	if d.path != c.path || d.ino != c.ino || d.uid != noEntryUID || d.gid != noEntryUID {
		t.Errorf("uid %d's batch got %+v, want root's pool file %+v claimed", noEntryUID, d, c)
	}
}

// TestUserBatchInItsCgroupAndBound: the credential change goes with the
// start inside the batch's cgroup and with the CPU affinity set on the
// forking thread.
func TestUserBatchInItsCgroupAndBound(t *testing.T) {
	needRoot(t)
	tree := testTree(t)
	s, _ := userSpec(t, lookupUser(t, 65534, 65534), "sh", "-c", "id -u; cat /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status")
	s.Cgroup, s.CPUs = tree, []int{0}
	res := start(t, s).Wait()
	log := readLog(t, s)
	if res.ExitCode != 0 {
		t.Fatalf("%+v\n%s", res, log)
	}
	if !strings.Contains(log, "\n65534\n") || !regexp.MustCompile(`(?m)^\d+:[^:]*:\S*/t-b0-a1-[0-9a-f]+$`).MatchString(log) ||
		!regexp.MustCompile(`(?m)^Cpus_allowed_list:\s+0$`).MatchString(log) {
		t.Errorf("not run as nobody inside its cgroup on cpu 0:\n%s", log)
	}
}

// TestUserBatchDiesWithTheController: the parent-death signal survives the
// credential change (Go sets it after setuid, which clears it).
func TestUserBatchDiesWithTheController(t *testing.T) {
	needRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctl := exec.Command(self)
	ctl.Env = append(os.Environ(), helperEnv+"=controller", runDirEnv+"="+dir, userEnv+"=nobody")
	out, err := ctl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ctl.Stderr = os.Stderr
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctl.Process.Kill(); _ = ctl.Wait() })
	var pg ProcessGroup
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &pg) != nil || pg.PGID <= 1 {
		t.Fatalf("controller said %q, %v", line, err)
	}
	t.Cleanup(func() { _ = signalGroup(pg.PGID, unix.SIGKILL) })
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pg.PGID), "status"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^Uid:\s+(.*)$`).FindSubmatch(status); m == nil ||
		!slices.Equal(strings.Fields(string(m[1])), []string{"65534", "65534", "65534", "65534"}) {
		t.Fatalf("the leader's ids are not nobody's:\n%s", status)
	}
	_ = ctl.Process.Signal(syscall.SIGKILL)
	_ = ctl.Wait()
	waitFor(t, "the leader's death", func() bool { return !alive(pg.PGID) })
}

// MayRead judges a path as the kernel would for the user, by the mode
// bits of every directory on the way and of the file.
func TestMayReadFollowsTheModeBits(t *testing.T) {
	base := t.TempDir() // and its parent: 0700, made reachable
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	u := &User{UID: 4242, GID: 4242, Groups: []uint32{4242, 5000}}
	mk := func(name string, mode os.FileMode, uid, gid int) string {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	hidden := filepath.Join(private, "open")
	if err := os.WriteFile(hidden, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(mk("rootonly", 0o600, 0, 0), link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{mk("world", 0o644, 0, 0), true},
		{mk("mine", 0o600, 4242, 4242), true},
		{mk("notmine", 0o600, 4343, 4242), false},
		{mk("group", 0o640, 0, 5000), true},
		{mk("othergroup", 0o640, 0, 6000), false},
		{mk("ownerdenied", 0o064, 4242, 5000), false}, // the owner's bits, not the group's
		{filepath.Join(base, "rootonly"), false},
		{link, false},
		{hidden, false},
		{private, false},
		{base, true},
	} {
		err := u.MayRead(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("MayRead(%s) = %v, want ok=%v", tc.path, err, tc.ok)
		}
	}
	if err := (&User{UID: 0}).MayRead(hidden); err != nil {
		t.Errorf("root: %v", err)
	}
}

// AsUser judges paths as for the user, on a thread of its own: a root-only
// file cannot be read nor a root-only directory listed inside it, and the
// rest of the process is root as before.
func TestAsUserSeesWhatTheUserSees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: changes a thread's filesystem identity (CI runs as root)")
	}
	base := t.TempDir()
	if err := os.Chmod(filepath.Dir(base), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(base, "secret")
	if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.WriteFile(open, []byte("all"), 0o644); err != nil {
		t.Fatal(err)
	}
	nobody := &User{UID: 65534, GID: 65534, Groups: []uint32{65534}}
	for range 20 { // the thread is thrown away each time: no identity leaks
		err := AsUser(nobody, func() error {
			if _, err := os.ReadFile(secret); !errors.Is(err, fs.ErrPermission) {
				return fmt.Errorf("read a root-only file: %v, want permission denied", err)
			}
			if _, err := os.ReadDir(private); !errors.Is(err, fs.ErrPermission) {
				return fmt.Errorf("listed a root-only directory: %v, want permission denied", err)
			}
			if _, err := os.ReadFile(open); err != nil {
				return fmt.Errorf("read a world-readable file: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadFile(secret); err != nil {
			t.Fatalf("after AsUser, the process reads its own file no more: %v", err)
		}
	}
	// The very thread AsUser ran on is root again (it is given back to
	// the runtime, not thrown away: a batch it forked would die with it).
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := AsUser(nobody, func() error { return nil }); err != nil {
			done <- err
			return
		}
		_, err := os.ReadFile(secret)
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("the thread AsUser ran on is not root again: %v", err)
	}
}
