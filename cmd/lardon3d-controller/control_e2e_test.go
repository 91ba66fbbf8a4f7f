package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/control"
)

// budgetsOf is budgets -o json, as run on spool's machine.
func budgetsOf(t *testing.T, spool string) budgetsDoc {
	t.Helper()
	out, code := runCLI(t, "budgets", "-o", "json", "--spool", spool)
	var doc budgetsDoc
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil {
		t.Fatalf("budgets (exit %d):\n%s", code, out)
	}
	return doc
}

// cliAs is a command of the controller's binary run as uid (setpriv),
// on spool's isolated machine.
func cliAs(t *testing.T, uid int, spool string, args ...string) *exec.Cmd {
	t.Helper()
	id := strconv.Itoa(uid)
	full := append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", filepath.Join(binaries(t), "lardon3d-controller")}, args...)
	cmd := exec.Command("setpriv", full...)
	cmd.Env = isolated(os.Environ(), spool)
	cmd.Dir = "/"
	return cmd
}

// stringer is a func as a String method.
type stringer func() string

func (f stringer) String() string { return f() }

func outputOf(cmd *exec.Cmd) (string, int) {
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		return err.Error(), -1
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// exec --memory 3Gi started while a batch holds the memory waits, saying
// why, until the governor grants it; while it holds, no batch is admitted
// into its memory; kill -9 of exec releases the hold (budgets shows it
// gone), the program it started runs on, and the task then ends Done.
func TestExecWaitsForTheMemoryAndKill9ReleasesIt(t *testing.T) {
	spool := newSpool(t)
	marks := filepath.Join(t.TempDir(), "batches")
	writeManifest(t, spool, "a.yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: a}
spec:
  command: [sh, -c, 'echo x >> %s; sleep 1']
  items: {count: 4}
  resources: {batch: {max: 1}, fixed: {memory: 3Gi}}
`, marks))
	c := startController(t, spool, "--memory-capacity", "4Gi", "--memory-reserved", "-1")
	eventually(t, 30*time.Second, "a batch running", func() bool { return budgetsOf(t, spool).Reservations == 1 })

	started := filepath.Join(t.TempDir(), "program")
	ex := exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), "exec", "--memory", "3Gi", "--", "sh", "-c", "echo $$ > "+started+"; exec sleep 60")
	ex.Env = isolated(os.Environ(), spool)
	ex.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: the program, which outlives exec, keeps it open.
	logf, err := os.Create(filepath.Join(t.TempDir(), "exec.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ex.Stderr, ex.Stdout = logf, logf
	stderr := stringer(func() string { return string(mustRead(t, logf.Name())) })
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-ex.Process.Pid, syscall.SIGKILL); _ = ex.Wait() })
	eventually(t, 30*time.Second, "the program started under its hold", func() bool { _, err := os.Stat(started); return err == nil })
	if !strings.Contains(stderr.String(), "exec: waiting for memory 3.0GiB") || !strings.Contains(stderr.String(), "granted") {
		t.Errorf("exec's terminal did not say why it waited, then that it was granted:\n%s", stderr.String())
	}
	if n := strings.Count(string(mustRead(t, marks)), "x"); n >= 4 {
		t.Errorf("the hold was granted only after all %d batches: the batches did not leave it room", n)
	}
	// Held: no batch (3Gi) fits beside it in 4Gi. Sampled: any batch
	// admitted meanwhile fails.
	for range 5 {
		doc := budgetsOf(t, spool)
		if len(doc.Holds) != 1 || doc.Holds[0].Grant == nil || doc.Holds[0].PID != ex.Process.Pid || doc.Reservations != 1 {
			t.Fatalf("while exec holds: holds %+v, %d reservations (want exec's alone)", doc.Holds, doc.Reservations)
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, code := runCLI(t, "get", "--spool", spool)
	if code != 0 || !strings.Contains(out, "hold/") || !strings.Contains(out, "sleep 60") {
		t.Errorf("get does not show the hold beside the tasks (exit %d):\n%s", code, out)
	}
	if err := ex.Process.Kill(); err != nil { // kill -9 of exec alone, not its program
		t.Fatal(err)
	}
	_ = ex.Wait()
	eventually(t, 10*time.Second, "the hold released after kill -9", func() bool { return len(budgetsOf(t, spool).Holds) == 0 })
	pid, _ := strconv.Atoi(strings.TrimSpace(string(mustRead(t, started))))
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("the program exec started died with exec: %v", err)
	}
	eventually(t, 60*time.Second, "the task Done", func() bool { return phaseOf(t, filepath.Join(spool, "a.yaml")) == v1alpha1.PhaseDone })
	if strings.Count(c.stderr.String(), `"hold released"`) != 1 {
		t.Errorf("the hold was released %d times, want once", strings.Count(c.stderr.String(), `"hold released"`))
	}
	// exec's own status is the program's; --no-wait refuses what does
	// not fit now.
	ok := exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), "exec", "--memory", "1Gi", "--", "sh", "-c", "exit 7")
	ok.Env = isolated(os.Environ(), spool)
	if out, code := outputOf(ok); code != 7 {
		t.Errorf("exec of a program exiting 7: exit %d\n%s", code, out)
	}
	big := exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), "exec", "--memory", "64Gi", "--", "true")
	big.Env = isolated(os.Environ(), spool)
	if out, code := outputOf(big); code != 1 || !strings.Contains(out, "never be granted") {
		t.Errorf("exec of more than the machine has: exit %d\n%s", code, out)
	}
}

// Many exec clients at once, some killed: every hold released exactly
// once, nothing reserved after.
func TestManyExecClientsReleaseEachHoldOnce(t *testing.T) {
	spool := newSpool(t)
	c := startController(t, spool, "--memory-capacity", "4Gi", "--memory-reserved", "-1")
	eventually(t, 30*time.Second, "serving", func() bool { return strings.Contains(c.stderr.String(), `"control socket"`) })
	var cmds []*exec.Cmd
	for i := range 12 {
		ex := exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), "exec", "--memory", "1Gi", "--", "sleep", "0.3")
		ex.Env = isolated(os.Environ(), spool)
		if err := ex.Start(); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			time.Sleep(20 * time.Millisecond)
			_ = ex.Process.Kill()
		}
		cmds = append(cmds, ex)
	}
	for _, ex := range cmds {
		_ = ex.Wait()
	}
	eventually(t, 10*time.Second, "every hold released", func() bool {
		d := budgetsOf(t, spool)
		return len(d.Holds) == 0 && d.Reservations == 0
	})
	granted, released := strings.Count(c.stderr.String(), `"hold granted"`), strings.Count(c.stderr.String(), `"hold released"`)
	if granted != released || granted < 8 {
		t.Errorf("%d holds granted, %d released (want equal, at least the 8 not killed)", granted, released)
	}
}

// usersMachine makes the spools of one machine reachable by other users:
// base and its parents searchable, the machine's state directory as the
// system's.
func usersMachine(t *testing.T, n int) []string {
	t.Helper()
	sp := spoolsOfOneMachine(t, n)
	base := filepath.Dir(sp[0])
	for d := base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(base, "machine-state", "lardon3d"), 0o755); err != nil {
		t.Fatal(err)
	}
	return sp
}

// A user (uid 65534) adds their own spool to root's running controller,
// without root and without a restart: its task runs as them. They cannot
// add root's directory nor another user's (4242), even through a symlink
// of their own; another user cannot remove their spool; they can, and it
// is served no more.
func TestAUserAddsTheirSpoolToARootController(t *testing.T) {
	sp := usersMachine(t, 3) // root's, nobody's, 4242's
	for i, uid := range []int{0, 65534, 4242} {
		if err := os.Chmod(sp[i], 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(sp[i], uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	task := func(dir, name string, uid int) string {
		p := writeManifest(t, dir, name+".yaml", fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: %s}\nspec:\n  command: [sh, -c, 'id -u > %s.uid']\n  items: {count: 1}\n", name, name))
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	task(sp[2], "theirs", 4242)
	c := startController(t, sp[0])
	eventually(t, 30*time.Second, "the control socket", func() bool { return strings.Contains(c.stderr.String(), `"control socket"`) })
	mine := task(sp[1], "mine", 65534)

	out, code := outputOf(cliAs(t, 65534, sp[1], "spool", "add", sp[1]))
	if code != 0 {
		t.Fatalf("spool add of the user's own spool: exit %d\n%s", code, out)
	}
	eventually(t, 60*time.Second, "the user's task Done", func() bool { return phaseOf(t, mine) == v1alpha1.PhaseDone })
	if got := strings.TrimSpace(string(mustRead(t, filepath.Join(sp[1], "mine.uid")))); got != "65534" {
		t.Errorf("the added spool's task ran as uid %s, want 65534", got)
	}
	if out, code := runCLI(t, "get", "--spool", sp[1]); code != 0 || !strings.Contains(out, "Done") {
		t.Errorf("get on the added spool (exit %d):\n%s", code, out)
	}
	// Root's and 4242's directories: refused, directly or through a
	// symlink the user owns.
	link := filepath.Join(sp[1], "to-theirs")
	if err := os.Symlink(sp[2], link); err != nil {
		t.Fatal(err)
	}
	_ = os.Lchown(link, 65534, 65534)
	for _, dir := range []string{sp[0], sp[2], link} {
		out, code := outputOf(cliAs(t, 65534, sp[1], "spool", "add", dir))
		if code == 0 || !strings.Contains(out, "a user may add only their own spool") {
			t.Errorf("spool add %s by uid 65534: exit %d\n%s", dir, code, out)
		}
	}
	if _, err := os.Stat(filepath.Join(sp[2], "theirs.uid")); err == nil {
		t.Error("4242's task ran")
	}
	// Already served: refused.
	if out, code := outputOf(cliAs(t, 65534, sp[1], "spool", "add", sp[1])); code == 0 || !strings.Contains(out, "already served") {
		t.Errorf("a second add: exit %d\n%s", code, out)
	}
	if out, code := outputOf(cliAs(t, 4242, sp[1], "spool", "remove", sp[1])); code == 0 || !strings.Contains(out, "only they or root") {
		t.Errorf("spool remove by another user: exit %d\n%s", code, out)
	}
	if out, code := outputOf(cliAs(t, 65534, sp[1], "spool", "remove", sp[1])); code != 0 {
		t.Fatalf("spool remove by its user: exit %d\n%s", code, out)
	}
	later := task(sp[1], "later", 65534)
	time.Sleep(2 * time.Second)
	if p := phaseOf(t, later); p != "" {
		t.Errorf("a task dropped in the removed spool: phase %q", p)
	}
	// And it can be added again: the task left behind then runs.
	if out, code := outputOf(cliAs(t, 65534, sp[1], "spool", "add", sp[1])); code != 0 {
		t.Fatalf("add again: exit %d\n%s", code, out)
	}
	eventually(t, 60*time.Second, "the later task Done", func() bool { return phaseOf(t, later) == v1alpha1.PhaseDone })
	select {
	case <-c.done:
		t.Fatalf("the controller exited (%d)", c.code)
	default:
	}
}

// run --exit-when-done --join-running (what make run does) on a machine
// where a controller already runs: the fresh spool is served through it,
// run waits for every task, prints the table and removes the spool;
// without --join-running, run is refused as before.
func TestRunJoinsTheRunningController(t *testing.T) {
	sp := spoolsOfOneMachine(t, 2)
	c := startController(t, sp[0])
	eventually(t, 30*time.Second, "the control socket", func() bool { return strings.Contains(c.stderr.String(), `"control socket"`) })
	for _, name := range []string{"one", "two"} {
		writeManifest(t, sp[1], name+".yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: "+name+"}\nspec:\n  command: ['true']\n  items: {count: 2}\n")
	}
	if out, code := runCLI(t, "run", "--spool", sp[1], "--exit-when-done"); code != 2 {
		t.Fatalf("run without --join-running beside a running controller: exit %d\n%s", code, out)
	}
	out, code := runCLI(t, "run", "--spool", sp[1], "--exit-when-done", "--join-running")
	if code != 0 || strings.Count(out, "Done") < 2 || !strings.Contains(out, "served through it") {
		t.Fatalf("run --join-running: exit %d\n%s", code, out)
	}
	eventually(t, 10*time.Second, "the spool removed", func() bool { return strings.Contains(c.stderr.String(), "spool removed over the control socket") })
	// The Makefile's run target is that command.
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil || !strings.Contains(string(mk), `run --spool "$$spool" --exit-when-done --join-running`) {
		t.Errorf("make run does not join a running controller (%v)", err)
	}
	_ = control.Protocol
}
