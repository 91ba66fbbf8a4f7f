package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
)

// These tests put controllers where the system service puts them
// (/run/lardon3d, /dev/shm/lardon3d), without LARDON3D_RUN_DIR, so each
// runs on a machine of its own: a private mount namespace, held by a
// process that waits, in which /run and /dev/shm are fresh tmpfs. Root's
// controllers and the other users' processes (setpriv) enter it with
// nsenter; the host's /run/lardon3d is never touched.

// machineNS is such a namespace.
type machineNS struct {
	pid  int
	base string // a directory outside it every user may search
}

// newMachineNS makes a machine of its own for the test; layout is run in
// it first (as root), to prepare its /run and /dev/shm.
func newMachineNS(t *testing.T) *machineNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a mount namespace and other users' processes (CI runs as root)")
	}
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs -o mode=755 none /run && mount -t tmpfs -o mode=1777 none /dev/shm && echo ready && exec cat")
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatalf("unshare (util-linux): %v", err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = holder.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the namespace's holder: %q, %v", line, err)
	}
	base := t.TempDir()
	// Other users reach what is made below it (t.TempDir makes 0700).
	for d := base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return &machineNS{pid: holder.Process.Pid, base: base}
}

// command runs argv in the namespace as uid (0: root, else with gid uid
// and no supplementary groups), with env.
func (m *machineNS) command(uid int, env []string, argv ...string) *exec.Cmd {
	args := []string{"--mount=/proc/" + strconv.Itoa(m.pid) + "/ns/mnt", "--"}
	if uid != 0 {
		args = append(args, "setpriv", "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(uid), "--clear-groups")
	}
	cmd := exec.Command("nsenter", append(args, argv...)...)
	cmd.Env = env
	return cmd
}

// sh runs a shell command in the namespace as uid and fails the test
// unless it succeeds.
func (m *machineNS) sh(t *testing.T, uid int, script string) {
	t.Helper()
	if out, err := m.command(uid, os.Environ(), "sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v\n%s", uid, script, err, out)
	}
}

// tmpfiles makes the registry's directories as deploy/systemd's tmpfiles
// entry says, with systemd-tmpfiles where it is installed.
func (m *machineNS) tmpfiles(t *testing.T) {
	t.Helper()
	conf, err := filepath.Abs("../../deploy/systemd/lardon3d.tmpfiles.conf")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("systemd-tmpfiles"); err == nil {
		m.sh(t, 0, "systemd-tmpfiles --create "+conf)
		return
	}
	data, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[0] == "d" {
			m.sh(t, 0, "mkdir -p "+f[1]+" && chmod "+f[2]+" "+f[1]+" && chown "+f[3]+":"+f[4]+" "+f[1])
		}
	}
}

// lockedBy starts, as uid in the namespace, flock(1) holding the
// exclusive lock of path (made if missing) until the test ends: a forged
// claim, locked as a controller's is, by a process that is not one.
func (m *machineNS) lockedBy(t *testing.T, uid int, path string) {
	t.Helper()
	cmd := m.command(uid, os.Environ(), "flock", "--exclusive", path, "sh", "-c", "echo locked; exec cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("flock %s as uid %d: %q, %v", path, uid, line, err)
	}
}

// userSpool makes a spool of uid's, with a state home of theirs, below
// the namespace's base.
func (m *machineNS) userSpool(t *testing.T, uid int, name string) (spool, home string) {
	t.Helper()
	home = filepath.Join(m.base, name)
	spool = filepath.Join(home, "spool")
	for _, d := range []string{home, spool, filepath.Join(home, "state")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return spool, home
}

// controllerEnv is the environment of a controller in the namespace: no
// LARDON3D_RUN_DIR (the standard directories) unless runDir, its state
// home stateHome.
func controllerEnv(t *testing.T, stateHome, runDir string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, registry.EnvDir+"=") || strings.HasPrefix(kv, "XDG_STATE_HOME=") || strings.HasPrefix(kv, "HOME=")
	})
	env = append(env, "PATH="+binaries(t)+string(os.PathListSeparator)+os.Getenv("PATH"), "XDG_STATE_HOME="+stateHome, "HOME="+filepath.Dir(stateHome))
	if runDir != "" {
		env = append(env, registry.EnvDir+"="+runDir)
	}
	return env
}

// startIn starts `lardon3d-controller run --spool spool args...` in the
// namespace as uid.
func (m *machineNS) startIn(t *testing.T, uid int, env []string, spool string, args ...string) *controller {
	t.Helper()
	full := append([]string{filepath.Join(binaries(t), "lardon3d-controller"), "run", "--spool", spool, "--log-format", "json",
		"--kill-grace", "2s", "--load-threshold", "-1", "--cgroups", "off"}, args...)
	cmd := m.command(uid, env, full...)
	return launch(t, cmd, func(c *controller) {
		if t.Failed() {
			t.Logf("controller (uid %d) on %s:\n%s", uid, spool, tail(c.stderr.String(), 4000))
		}
	})
}

// rootSpool is a spool of root's with one quick task, and root's state
// home, below the namespace's base.
func (m *machineNS) rootSpool(t *testing.T) (spool, stateHome string) {
	t.Helper()
	spool = filepath.Join(m.base, "root-spool")
	if err := os.Mkdir(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, spool, "quick.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: quick}\nspec:\n  command: ['true']\n  items: {count: 1}\n")
	return spool, filepath.Join(m.base, "root-state")
}

// endedWith waits for c's end and returns its exit code.
func endedWith(t *testing.T, c *controller, what string) int {
	t.Helper()
	select {
	case <-c.done:
		return c.code
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: still running after 60 s:\n%s", what, tail(c.stderr.String(), 3000))
		return -1
	}
}

// A user plants a claim in the registry, locked as a controller's is, but
// by flock(1): valid JSON naming root and the system's spool, or not JSON
// at all; in /run/lardon3d as the older tmpfiles entry made it (1777), in
// the users' directory, or in a /dev/shm/lardon3d the user made first.
// The system service starts all the same, registers where root's claims
// go (mode 0755 from then on), and leaves the user's files alone.
func TestAForgedClaimDoesNotKeepTheSystemServiceFromStarting(t *testing.T) {
	const attacker = 4242
	forgedJSON := `{"pid":1,"uid":0,"user":"root","spools":["/var/spool/lardon3d"],"command":"systemd"}`
	cases := []struct {
		name   string
		layout func(m *machineNS, t *testing.T)
		dir    string
		body   string
	}{
		{"in a world-writable /run/lardon3d, valid JSON", func(m *machineNS, t *testing.T) { m.sh(t, 0, "mkdir -m 1777 /run/lardon3d") }, registry.PrimaryDir, forgedJSON},
		{"in a world-writable /run/lardon3d, not JSON", func(m *machineNS, t *testing.T) { m.sh(t, 0, "mkdir -m 1777 /run/lardon3d") }, registry.PrimaryDir, "{not json"},
		{"in the users' directory", (*machineNS).tmpfiles, registry.UsersDir, forgedJSON},
		{"in a /dev/shm/lardon3d the user made first", func(m *machineNS, t *testing.T) {
			m.sh(t, attacker, "mkdir -m 755 "+registry.FallbackDir)
		}, registry.FallbackDir, forgedJSON},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newMachineNS(t)
			tc.layout(m, t)
			var planted []string
			for _, pid := range []string{"1", "99999"} {
				path := filepath.Join(tc.dir, "controller-"+pid+".json")
				m.sh(t, attacker, "printf '%s' '"+tc.body+"' > "+path)
				m.lockedBy(t, attacker, path)
				planted = append(planted, path)
			}
			spool, state := m.rootSpool(t)
			c := m.startIn(t, 0, controllerEnv(t, state, ""), spool, "--exit-when-done")
			if code := endedWith(t, c, "root's controller"); code != 0 {
				t.Fatalf("root's controller beside a forged claim: exit %d, want 0:\n%s", code, tail(c.stderr.String(), 3000))
			}
			if phaseOf(t, filepath.Join(spool, "quick.yaml")) != v1alpha1.PhaseDone {
				t.Errorf("root's task is not Done")
			}
			if !strings.Contains(c.stderr.String(), `"registered":"`+registry.PrimaryDir+`/controller-`) {
				t.Errorf("root's controller did not register in %s:\n%s", registry.PrimaryDir, tail(c.stderr.String(), 2000))
			}
			// The system's directory is root's alone now; the user's files stay.
			m.sh(t, 0, "test \"$(stat -c %a:%u "+registry.PrimaryDir+")\" = 755:0")
			for _, p := range planted {
				m.sh(t, 0, "test -f "+p)
			}
			// And the user can plant nothing more where root registers.
			if out, err := m.command(attacker, os.Environ(), "sh", "-c", "echo x > "+registry.PrimaryDir+"/controller-2.json").CombinedOutput(); err == nil {
				t.Errorf("uid %d wrote in %s: %s", attacker, registry.PrimaryDir, out)
			}
		})
	}
}

// A user's controller runs first (the user unit, or by hand); the system
// service starts all the same, logs it, and the user's controller, seeing
// root's claim, stops within seconds: exit 2, saying why. Started again,
// it is refused, naming root's.
func TestTheSystemServiceStartsBesideAUsersController(t *testing.T) {
	const user = 65534
	m := newMachineNS(t)
	m.tmpfiles(t)
	uspool, uhome := m.userSpool(t, user, "nobody")
	long := writeManifest(t, uspool, "long.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: long}\nspec:\n  command: [sleep, '60']\n  items: {count: 1}\n")
	if err := os.Chown(long, user, user); err != nil {
		t.Fatal(err)
	}
	theirs := m.startIn(t, user, controllerEnv(t, filepath.Join(uhome, "state"), ""), uspool)
	eventually(t, 20*time.Second, "the user's controller serving", func() bool { return strings.Contains(theirs.stderr.String(), `"serving"`) })
	if !strings.Contains(theirs.stderr.String(), `"registered":"`+registry.UsersDir+`/controller-`) {
		t.Errorf("the user's controller did not register in %s", registry.UsersDir)
	}
	eventually(t, 20*time.Second, "the user's task running", func() bool { return phaseOf(t, long) == v1alpha1.PhaseRunning })

	spool, state := m.rootSpool(t)
	root := m.startIn(t, 0, controllerEnv(t, state, ""), spool)
	eventually(t, 20*time.Second, "root's controller serving", func() bool { return strings.Contains(root.stderr.String(), `"serving"`) })
	if !strings.Contains(root.stderr.String(), `"pid":`+strconv.Itoa(theirs.cmd.Process.Pid)+`,"uid":65534`) {
		t.Errorf("root's controller does not name the user's (pid %d) in its log:\n%s", theirs.cmd.Process.Pid, tail(root.stderr.String(), 3000))
	}
	code := endedWith(t, theirs, "the user's controller after root's started")
	if out := theirs.stderr.String(); code != 2 || !strings.Contains(out, "the system service") || !strings.Contains(out, "pid "+strconv.Itoa(root.cmd.Process.Pid)) {
		t.Errorf("the user's controller: exit %d, want 2 naming the system service's pid %d:\n%s", code, root.cmd.Process.Pid, tail(out, 3000))
	}
	// It stopped as on SIGTERM: its batch stopped, its status written.
	if phase := phaseOf(t, long); phase == v1alpha1.PhaseRunning {
		t.Errorf("the user's task is still %s after its controller stopped", phase)
	}
	again := m.startIn(t, user, controllerEnv(t, filepath.Join(uhome, "state"), ""), uspool)
	if code := endedWith(t, again, "the user's controller started again"); code != 2 || !strings.Contains(again.stderr.String(), "pid "+strconv.Itoa(root.cmd.Process.Pid)) {
		t.Errorf("the user's controller started again: exit %d, want 2 naming root's:\n%s", code, tail(again.stderr.String(), 3000))
	}
	select {
	case <-root.done:
		t.Errorf("root's controller ended (exit %d)", root.code)
	default:
	}
}

// LARDON3D_RUN_DIR names where a controller registers, not what a user's
// reads: beside the system service, a user's controller registering in a
// directory of its own is refused. Root's isolates itself with it (the
// test suite, run as root, on a machine where the service may run).
func TestARunDirDoesNotMakeASecondGovernor(t *testing.T) {
	const user = 4242
	m := newMachineNS(t)
	m.tmpfiles(t)
	spool, state := m.rootSpool(t)
	root := m.startIn(t, 0, controllerEnv(t, state, ""), spool)
	eventually(t, 20*time.Second, "root's controller serving", func() bool { return strings.Contains(root.stderr.String(), `"serving"`) })
	rootPID := "pid " + strconv.Itoa(root.cmd.Process.Pid)

	uspool, uhome := m.userSpool(t, user, "alice")
	myreg := filepath.Join(uhome, "myreg")
	// --exit-when-done on spools without a task: a controller let start
	// would end at once with 0.
	theirs := m.startIn(t, user, controllerEnv(t, filepath.Join(uhome, "state"), myreg), uspool, "--exit-when-done")
	if code := endedWith(t, theirs, "a user's controller with its own registry"); code != 2 || !strings.Contains(theirs.stderr.String(), rootPID) {
		t.Errorf("a user's controller with %s=%s: exit %d, want 2 naming %s:\n%s", registry.EnvDir, myreg, code, rootPID, tail(theirs.stderr.String(), 3000))
	}
	other := filepath.Join(m.base, "root-spool2")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	isolatedRoot := m.startIn(t, 0, controllerEnv(t, filepath.Join(m.base, "root-state2"), filepath.Join(m.base, "otherreg")), other, "--exit-when-done")
	if code := endedWith(t, isolatedRoot, "root's controller with its own registry"); code != 0 {
		t.Errorf("root's controller with %s: exit %d, want 0 (isolated):\n%s", registry.EnvDir, code, tail(isolatedRoot.stderr.String(), 3000))
	}
	// Nothing of the user's was registered anywhere.
	entries, _ := os.ReadDir(myreg)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "controller-") {
			t.Errorf("%s: a claim left: %s", myreg, e.Name())
		}
	}
}
