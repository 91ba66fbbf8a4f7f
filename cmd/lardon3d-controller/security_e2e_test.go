package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/webview"
)

// startControllerHolding is startController for a controller started
// the way a root shell that holds descriptors and secrets starts it
// (`exec 7<secret 8>>file; AWS_SECRET_ACCESS_KEY=... lardon3d-controller
// run`): files[i] is its descriptor 3+i (nil: none), inherited without
// close-on-exec, and env is added to its environment.
func startControllerHolding(t *testing.T, spool string, files []*os.File, env []string, args ...string) *controller {
	t.Helper()
	bin := binaries(t)
	full := append([]string{"run", "--spool", spool, "--log-format", "json", "--kill-grace", "2s", "--load-threshold", "-1"}, args...)
	cmd := exec.Command(filepath.Join(bin, "lardon3d-controller"), full...)
	cmd.Env = append(isolated(append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH")), spool), env...)
	cmd.ExtraFiles = files
	return launch(t, cmd, afterController(t, spool, full))
}

// userSpool makes a spool of its own machine owned by uid, that uid can
// reach, with the machine's state directory under it as a root
// controller's: the layout of /home/USER/lardon3d/spool served by the
// system service. It returns the spool and a directory only root reads.
func userSpool(t *testing.T, uid int) (spool, private string) {
	t.Helper()
	spool = spoolsOfOneMachine(t, 1)[0]
	base := filepath.Dir(spool)
	for d := base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(spool, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(spool, uid, uid); err != nil {
		t.Fatal(err)
	}
	private = filepath.Join(base, "root-only")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	return spool, private
}

// writeUserManifest writes a manifest into spool as uid's file.
func writeUserManifest(t *testing.T, spool, file string, uid int, body string) string {
	t.Helper()
	p := writeManifest(t, spool, file, body)
	if err := os.Chown(p, uid, uid); err != nil {
		t.Fatal(err)
	}
	return p
}

// A root controller started from a shell that holds a descriptor on a
// root-only secret (fd 7) and one appending to a root-owned file (fd 8),
// with secrets and root's PATH in its environment, runs nobody's batch
// with none of it: fds 0-2 only (what the batch lists of its own
// /proc/PID/fd), no read of the secret, no write to root's file, and an
// environment built from nothing: nobody's login variables, the default
// PATH, the LARDON3D_* variables and the task's env (issue 59: the
// inherited descriptor, the inherited secret).
func TestABatchOfAnotherUserStartsClean(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the controller runs the batch as another user (CI runs as root)")
	}
	const uid = 65534
	spool, private := userSpool(t, uid)
	secret, appended := filepath.Join(private, "n06b-secret"), filepath.Join(private, "roots-file")
	if err := os.WriteFile(secret, []byte("the-secret-in-fd-7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(appended, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(appended, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeUserManifest(t, spool, "clean.yaml", uid, `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: clean}
spec:
  command: [sh, -c, 'ls -l /proc/$$/fd; for fd in $(ls /proc/$$/fd); do echo "fd $fd"; done; cat <&7; echo pwned >&8; echo "=env="; env']
  env: [{name: OWN, value: mine}]
  items: {count: 1}
`)
	c := startControllerHolding(t, spool, []*os.File{nil, nil, nil, nil, r, w},
		[]string{"AWS_SECRET_ACCESS_KEY=aws-s3cr3t-key", "SECRET_TOKEN=t0k3n-of-root", "PATH=/root/secret-bin:" + os.Getenv("PATH")},
		"--exit-when-done")
	if code := c.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("controller exit %d", code)
	}
	if p := phaseOf(t, filepath.Join(spool, "clean.yaml")); p != v1alpha1.PhaseDone {
		t.Fatalf("phase %q", p)
	}
	log, code := runCLI(t, "logs", "clean", "--spool", spool)
	if code != 0 || !strings.Contains(log, "=env=") {
		t.Fatalf("logs (exit %d):\n%s", code, log)
	}
	fds, env, _ := strings.Cut(log, "=env=")
	for _, fd := range []string{"7", "8"} {
		if strings.Contains(fds, "\nfd "+fd+"\n") {
			t.Errorf("nobody's batch holds the controller's fd %s:\n%s", fd, fds)
		}
	}
	for _, leak := range []string{"the-secret-in-fd-7", secret, appended, "aws-s3cr3t-key", "t0k3n-of-root", "/root/secret-bin"} {
		if strings.Contains(log, leak) {
			t.Errorf("%q reached nobody's batch:\n%s", leak, log)
		}
	}
	if got, _ := os.ReadFile(appended); string(got) != "root's\n" {
		t.Errorf("nobody's batch wrote to root's file through fd 8: %q", got)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(env, "\n") {
		if name, value, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "===") {
			vars[name] = value
		}
	}
	for name, want := range map[string]string{"PATH": runner.DefaultPath, "HOME": "/nonexistent", "USER": "nobody", "LOGNAME": "nobody",
		"OWN": "mine", "LARDON3D_TASK": "clean", "LARDON3D_BATCH_SIZE": "1"} {
		if vars[name] != want {
			t.Errorf("%s=%q in nobody's batch, want %q", name, vars[name], want)
		}
	}
	allowed := map[string]bool{"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "OWN": true, "PWD": true,
		"OMP_NUM_THREADS": true, "OPENBLAS_NUM_THREADS": true, "MKL_NUM_THREADS": true, "GOMAXPROCS": true,
		"CUDA_VISIBLE_DEVICES": true, "CUDA_DEVICE_ORDER": true}
	for name, value := range vars {
		if !allowed[name] && !strings.HasPrefix(name, "LARDON3D_") {
			t.Errorf("the controller's %s=%q reached nobody's batch", name, value)
		}
	}
}

// A user who writes status.logFile: /root-only/file into their own
// manifest (by hand while the controller is stopped, or while it runs)
// never gets that file back from root: neither the web view's task API
// nor `logs` nor `describe` read it; they read the log where the
// controller keeps it, and the controller puts the field right when it
// starts and when it stops (issue 59: the /etc/shadow read).
func TestAStatusLogFileNeverSteersRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a root controller serves another user's spool (CI runs as root)")
	}
	const uid = 65534
	spool, private := userSpool(t, uid)
	secret := filepath.Join(private, "shadow")
	const shadow = "root:*:20228:0:99999:7:::secret-line"
	if err := os.WriteFile(secret, []byte(shadow+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeUserManifest(t, spool, "lf.yaml", uid, `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: lf}
spec:
  command: [sh, -c, 'echo the-real-output']
  items: {count: 1}
`)
	c := startController(t, spool, "--exit-when-done")
	if code := c.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("controller exit %d", code)
	}
	real := readTask(t, path).Status.LogFile
	if real == "" || !strings.Contains(readFile(t, real), "the-real-output") {
		t.Fatalf("the task's log %q lacks its output", real)
	}
	// The user points the status at root's file (as they own the
	// manifest, they may write anything in it).
	forge := func() {
		t.Helper()
		data := readFile(t, path)
		if strings.Count(data, real) != 1 {
			t.Fatalf("the log's path is not once in:\n%s", data)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(data, real, secret, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	forge()
	noSecret := func(what, out string) {
		t.Helper()
		if strings.Contains(out, "secret-line") {
			t.Errorf("%s returned root's file:\n%s", what, out)
		}
	}
	out, code := runCLI(t, "logs", "lf", "--spool", spool)
	noSecret("logs", out)
	if code != 0 || !strings.Contains(out, "the-real-output") {
		t.Errorf("logs (exit %d) does not print the task's log:\n%s", code, out)
	}
	out, _ = runCLI(t, "describe", "lf", "--spool", spool)
	noSecret("describe", out)
	if strings.Contains(out, secret) {
		t.Errorf("describe shows the forged log path:\n%s", out)
	}

	// The web view of a controller that finds the forged status.
	c = startController(t, spool, "--http-addr", "127.0.0.1:0")
	base := "http://" + viewAddr(t, c)
	page := func() webview.TaskAnswer {
		t.Helper()
		var a webview.TaskAnswer
		eventually(t, 30*time.Second, "lf's page", func() bool {
			// As the spool's owner would ask (the view answers no one it
			// cannot name): with the controller's token.
			req, err := http.NewRequest(http.MethodGet, base+"/api/tasks/lf", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+viewToken(t, spool))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			noSecret("GET /api/tasks/lf", string(body))
			return resp.StatusCode == http.StatusOK && json.Unmarshal(body, &a) == nil
		})
		return a
	}
	if a := page(); a.LogFile != real || !strings.Contains(a.Log, "the-real-output") {
		t.Errorf("lf's page: logFile %q, log %q, want the task's log %s", a.LogFile, a.Log, real)
	}
	// The controller puts the field right: it is its own.
	eventually(t, 30*time.Second, "status.logFile put right", func() bool { return readTask(t, path).Status.LogFile == real })
	// Forged again while it runs (a change of the status block alone is
	// no event for the controller): never read, and put right when the
	// controller stops and writes every status it holds once more.
	forge()
	for range 10 {
		page()
		out, _ := runCLI(t, "logs", "lf", "--spool", spool)
		noSecret("logs", out)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	c.wait(t, 30*time.Second)
	if got := readTask(t, path).Status.LogFile; got != real {
		t.Errorf("after the controller stopped, status.logFile is %q, want %q", got, real)
	}
}

// Every descriptor of a running controller above 2 is close-on-exec,
// those it inherited included (fd 7 of the shell that started it): while
// a batch runs, a status is written and the web view serves, /proc shows
// none that a child would inherit.
func TestEveryDescriptorOfARunningControllerIsCloseOnExec(t *testing.T) {
	spool := newSpool(t)
	held, err := os.Open(writeManifest(t, t.TempDir(), "secret", "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	writeManifest(t, spool, "run.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: run}\nspec:\n  command: [sh, -c, 'echo LARDON3D_PROGRESS 1; sleep 30']\n  items: {count: 2}\n")
	c := startControllerHolding(t, spool, []*os.File{nil, nil, nil, nil, held}, nil, "--http-addr", "127.0.0.1:0")
	base := "http://" + viewAddr(t, c)
	eventually(t, 30*time.Second, "the batch running", func() bool {
		return phaseOf(t, filepath.Join(spool, "run.yaml")) == v1alpha1.PhaseRunning
	})
	if resp, err := http.Get(base + "/api/tasks/run"); err == nil {
		resp.Body.Close()
	}
	dir := filepath.Join("/proc", strconv.Itoa(c.cmd.Process.Pid), "fdinfo")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		info, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
				if err != nil {
					t.Fatalf("fd %d: flags %q", fd, v)
				}
				checked++
				if flags&syscall.O_CLOEXEC == 0 {
					link, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(c.cmd.Process.Pid), "fd", e.Name()))
					t.Errorf("the controller's fd %d (%s) would be inherited by its children", fd, link)
				}
			}
		}
	}
	if checked < 3 {
		t.Fatalf("only %d descriptors checked", checked)
	}
}
