package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/internal/testseed"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// The reproductions of issue 11 (files as people really write them), end to
// end: the real controller, real writers (shell redirections, vim), real
// kills.

// fastTask is rewritten by the controller every ~20 ms: one-item batches
// of a 20 ms command, 100,000 of them.
const fastTask = `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, "sleep 0.02"]
  items: {count: 100000}
  resources:
    batch: {min: 1, max: 1}
`

func waitRunning(t *testing.T, path string) *v1alpha1.Task {
	t.Helper()
	var task *v1alpha1.Task
	eventually(t, 20*time.Second, filepath.Base(path)+" Running", func() bool {
		task = readTask(t, path)
		return task.Status.Phase == v1alpha1.PhaseRunning
	})
	return task
}

// stopController stops a controller with SIGTERM and waits for it.
func stopController(t *testing.T, c *controller) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	c.wait(t, 20*time.Second)
}

// TestAppendsAndVimWritesDuringFastStatusWrites: 1,500 `echo >> t.yaml`
// by a shell, a few ms apart, then 200 in-place `vim -es` edits, while the
// controller rewrites the file's status every ~20 ms: no line is lost.
func TestAppendsAndVimWritesDuringFastStatusWrites(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "t.yaml", fastTask)
	c := startController(t, spool)
	waitRunning(t, path)
	// Each append is its own open/write/close by the shell; `read -t`
	// paces them (a builtin: no process per line).
	script := `for i in $(seq 1 1500); do echo "# append-$i" >> t.yaml; read -t 0.002 <> <(:) || true; done`
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = spool
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("appender: %v\n%s", err, out)
	}
	vims, refused := 0, 0
	if vim, err := exec.LookPath("vim"); err == nil {
		for i := 1; i <= 200; i++ {
			// vim refuses to save (E949 "File changed while writing", exit
			// 1) when the file it stat()ed is another inode once opened:
			// a status write swapped it in between. Like a user, try again.
			for try := 0; ; try++ {
				cmd := exec.Command(vim, "-N", "-u", "NONE", "-i", "NONE", "-es", "-c", fmt.Sprintf(`call append(line("$"), "# vim-%d")`, i), "-c", "wq!", "t.yaml")
				cmd.Dir = spool
				out, err := cmd.CombinedOutput()
				if err == nil {
					break
				}
				refused++
				if try == 20 {
					t.Fatalf("vim %d: %v\n%s", i, err, out)
				}
			}
			vims++
		}
	} else {
		t.Log("vim not installed: the in-place writes are covered by pkg/spool's TestInPlaceWritesDuringStatusWrites")
	}
	stopController(t, c)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for i := 1; i <= 1500; i++ {
		if !bytes.Contains(got, []byte(fmt.Sprintf("# append-%d\n", i))) {
			lost++
		}
	}
	lostVim := 0
	for i := 1; i <= vims; i++ {
		if !bytes.Contains(got, []byte(fmt.Sprintf("# vim-%d\n", i))) {
			lostVim++
		}
	}
	writes := strings.Count(c.stderr.String(), `"message":"status not written"`)
	t.Logf("lost %d of 1500 appends and %d of %d vim edits (vim itself refused %d saves, E949); %d status writes not made (deferred or gave up)", lost, lostVim, vims, refused, writes)
	if lost > 0 || lostVim > 0 {
		ents, _ := os.ReadDir(spool)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		for _, l := range strings.Split(c.stderr.String(), "\n") {
			if strings.Contains(l, "displaced") {
				t.Log(l)
			}
		}
		t.Fatalf("lost %d appends and %d vim edits; spool holds %v", lost, lostVim, names)
	}
	if task := readTask(t, path); task.Status.Progress.ItemsDone < 10 {
		t.Fatalf("the task hardly ran (%d items): the status writes this test is about did not happen", task.Status.Progress.ItemsDone)
	}
}

// TestTwoPieceWriteIsReadOnceClosed: a manifest written in two pieces a
// second apart, the first a complete Task, the second adding a dependency
// that never completes and a comment: the task never runs (it was not
// read half-written) and the file keeps every byte.
func TestTwoPieceWriteIsReadOnceClosed(t *testing.T) {
	spool := newSpool(t)
	dir := t.TempDir()
	head := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [sh, -c, \"true\"]\n  items: {count: 1}\n"
	tail := "  dependsOn: [never-done]\n# the tail comment\n"
	if err := os.WriteFile(filepath.Join(dir, "head.part"), []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tail.part"), []byte(tail), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startController(t, spool)
	writeManifest(t, spool, "ready.yaml", strings.Replace(head, "true", "true # ready", 1))
	eventually(t, 20*time.Second, "the controller to run", func() bool { return phaseOf(t, filepath.Join(spool, "ready.yaml")) == v1alpha1.PhaseDone })
	cmd := exec.Command("sh", "-c", fmt.Sprintf("(cat %s/head.part; sleep 1; cat %s/tail.part) > slow.yaml", dir, dir))
	cmd.Dir = spool
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writer: %v\n%s", err, out)
	}
	path := filepath.Join(spool, "slow.yaml")
	var task *v1alpha1.Task
	eventually(t, 20*time.Second, "the controller to report on slow.yaml", func() bool {
		task = readTask(t, path)
		return task.Status.Phase != ""
	})
	got, _ := os.ReadFile(path)
	if !bytes.HasPrefix(got, []byte(head+tail)) {
		t.Fatalf("the file lost bytes:\n%s", got)
	}
	if task.Status.Phase != v1alpha1.PhasePending || task.Status.StartTime != nil {
		t.Fatalf("the half-written task was acted on: phase %s, started %v", task.Status.Phase, task.Status.StartTime)
	}
	if strings.Contains(c.stderr.String(), `"task":"slow","from":"Pending","phase":"Reserved"`) {
		t.Fatalf("slow was admitted")
	}
}

// TestNonRegularManifestsDoNotHoldUpOthers: a FIFO, a socket and a symlink
// to a FIFO, present at start and added later, do not delay the other
// manifests (by more than a second) nor hang get.
func TestNonRegularManifestsDoNotHoldUpOthers(t *testing.T) {
	spool := newSpool(t)
	if err := syscall.Mkfifo(filepath.Join(spool, "fifo.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(spool, "sock.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Symlink("fifo.yaml", filepath.Join(spool, "tofifo.yaml")); err != nil {
		t.Fatal(err)
	}
	quick := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [sh, -c, \"sleep 30\"]\n  items: {count: 1}\n"
	first := writeManifest(t, spool, "first.yaml", quick)
	startController(t, spool)
	waitRunning(t, first)
	if err := syscall.Mkfifo(filepath.Join(spool, "fifo2.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo2.yaml", filepath.Join(spool, "tofifo2.yaml")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	second := writeManifest(t, spool, "second.yaml", quick)
	waitRunning(t, second)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a manifest dropped after a FIFO took %s to run", d)
	}
	done := make(chan struct{})
	var out string
	var code int
	go func() {
		out, code = runCLI(t, "get", "--spool", spool)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("get hangs on a FIFO")
	}
	if code != 0 {
		t.Fatalf("get: %d\n%s", code, out)
	}
	for _, n := range []string{"fifo", "sock", "tofifo", "fifo2", "tofifo2"} {
		if !regexp.MustCompile(`(?m)^` + n + `\s+Invalid\s.*not a regular file`).MatchString(out) {
			t.Errorf("get does not show %s as Invalid, not a regular file:\n%s", n, out)
		}
	}
}

// TestSecondControllerIsRefused: a second run on the same spool exits at
// once, non-zero, naming the first one's PID; get and describe still work.
func TestSecondControllerIsRefused(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "t.yaml", fastTask)
	first := startController(t, spool)
	waitRunning(t, path)
	start := time.Now()
	out, code := runCLI(t, "run", "--spool", spool, "--load-threshold", "-1", "--exit-when-done")
	if code == 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("second controller: exit %d after %s\n%s", code, time.Since(start), out)
	}
	if want := "PID " + strconv.Itoa(first.cmd.Process.Pid); !strings.Contains(out, want) {
		t.Fatalf("the refusal does not name %s:\n%s", want, out)
	}
	// And with another state directory: the spool itself is locked.
	out, code = runCLI(t, "run", "--spool", spool, "--state-dir", t.TempDir(), "--load-threshold", "-1")
	if code == 0 || !strings.Contains(out, "another controller runs on this spool") {
		t.Fatalf("second controller with its own state directory: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, "get", "--spool", spool); code != 0 || !strings.Contains(out, "Running") {
		t.Fatalf("get beside a controller: %d\n%s", code, out)
	}
	if out, code := runCLI(t, "describe", "--spool", spool, "t"); code != 0 || !strings.Contains(out, "Running") {
		t.Fatalf("describe beside a controller: %d\n%s", code, out)
	}
}

// TestEditorSaveAndRenameKeepTheBatch: emacs' first save (mv x.yaml
// x.yaml~; cp x.yaml~ x.yaml) and a plain rename to another file name
// leave the running batch alone (the same process group, still alive);
// a real deletion cancels it once the grace period is over.
func TestEditorSaveAndRenameKeepTheBatch(t *testing.T) {
	spool := newSpool(t)
	path := writeManifest(t, spool, "x.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  name: long-job
spec:
  command: [sh, -c, "sleep 60 & wait"]
  items: {count: 1}
`)
	c := startController(t, spool, "--delete-grace", "1s")
	var pgid int
	eventually(t, 20*time.Second, "the batch to run with a recorded process group", func() bool {
		task := readTask(t, path)
		if task.Status.Phase == v1alpha1.PhaseRunning && task.Status.ProcessGroup != nil {
			pgid = task.Status.ProcessGroup.PGID
			return len(groupMembers(pgid)) >= 2
		}
		return false
	})
	// Emacs' first save.
	if err := os.Rename(path, path+"~"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path + "~")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(data, "# saved by emacs\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	// A rename, after the save's grace period would have run out.
	time.Sleep(1500 * time.Millisecond) // past --delete-grace: what is checked is that nothing happened
	if n := len(groupMembers(pgid)); n < 2 {
		t.Fatalf("after an editor's save the batch's group has %d processes", n)
	}
	moved := filepath.Join(spool, "y.yaml")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the status written into the renamed file", func() bool {
		task := readTask(t, moved)
		return task.Status.Phase == v1alpha1.PhaseRunning && task.Status.ProcessGroup != nil && bytes.Contains(mustRead(t, moved), []byte("# saved by emacs"))
	})
	time.Sleep(1500 * time.Millisecond) // past --delete-grace again
	if task := readTask(t, moved); task.Status.ProcessGroup == nil || task.Status.ProcessGroup.PGID != pgid {
		t.Fatalf("after the rename the task runs another group: %+v (was %d)", task.Status.ProcessGroup, pgid)
	}
	if n := len(groupMembers(pgid)); n < 2 {
		t.Fatalf("after a rename the batch's group has %d processes", n)
	}
	if strings.Contains(c.stderr.String(), "task cancelled") {
		t.Fatalf("the task was cancelled")
	}
	if err := os.Remove(moved); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the deleted task's group to be killed", func() bool { return len(groupMembers(pgid)) == 0 })
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// leftoverDotfiles lists the write-back temporary files in dir.
func leftoverDotfiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if regexp.MustCompile(`^\..+\.lardon3d-[0-9a-f]{12}\.tmp$`).MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestKill9LeavesNoDotfiles: 25 SIGKILLs of a controller that rewrites
// status every ~20 ms, at random moments (fixed seed; LARDON3D_RANDOM_SEED
// for others); after each restart has listed the spool, none of the
// dotfiles the killed one left is there. A planted leftover goes too, a
// look-alike stays.
func TestKill9LeavesNoDotfiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(testseed.Seeds(t, 25)[0], 0))
	spool := newSpool(t)
	for i := 0; i < 3; i++ {
		writeManifest(t, spool, fmt.Sprintf("t%d.yaml", i), fastTask)
	}
	planted := filepath.Join(spool, ".t0.yaml.lardon3d-0123456789ab.tmp")
	lookalike := filepath.Join(spool, ".t0.yaml.lardon3d-notours.tmp")
	for _, p := range []string{planted, lookalike} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	left := 0
	var prev []string
	for kill := 0; kill <= 25; kill++ {
		c := startController(t, spool)
		eventually(t, 20*time.Second, "the spool listed", func() bool { return strings.Contains(c.stderr.String(), `"message":"spool listed"`) })
		for _, n := range prev {
			if _, err := os.Lstat(filepath.Join(spool, n)); err == nil {
				t.Fatalf("after restart %d, the leftover %s is still there", kill, n)
			}
		}
		if kill == 0 {
			if _, err := os.Lstat(planted); err == nil {
				t.Fatal("the planted leftover survived start-up")
			}
		}
		if kill == 25 {
			stopController(t, c)
			break
		}
		time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond) // a random moment
		_ = c.cmd.Process.Kill()
		c.wait(t, 10*time.Second)
		prev = leftoverDotfiles(t, spool)
		left += len(prev)
	}
	if rest := leftoverDotfiles(t, spool); len(rest) > 0 {
		t.Fatalf("dotfiles after a clean stop: %v", rest)
	}
	if _, err := os.Lstat(lookalike); err != nil {
		t.Fatalf("a dotfile that is not the controller's was removed: %v", err)
	}
	t.Logf("25 kills left %d dotfiles in all; each was removed by the next start-up", left)
}

// TestGetEscapesNamesAndShowsRefusedFiles: a file name with terminal
// escapes reaches get's output escaped, and files the controller refuses
// (aliases, two documents, too large) show as Invalid with the reason.
func TestGetEscapesNamesAndShowsRefusedFiles(t *testing.T) {
	spool := newSpool(t)
	ok := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n"
	writeManifest(t, spool, "\x1b]0;pwned\a\x1b[31mx.yaml", ok)
	writeManifest(t, spool, "named.yaml", strings.Replace(ok, "kind: Task\n", "kind: Task\nmetadata:\n  name: \"evil\\e[2Jname\"\n", 1))
	writeManifest(t, spool, "laughs.yaml", strings.Replace(ok, "kind: Task\n", "kind: Task\nmetadata:\n  labels:\n    a: &a \"lol\"\n    b: [*a,*a,*a]\n", 1))
	writeManifest(t, spool, "twodocs.yaml", ok+"---\n"+ok)
	writeManifest(t, spool, "big.yaml", ok+"# "+strings.Repeat("x", 2<<20)+"\n")
	out, code := runCLI(t, "get", "--spool", spool)
	if code != 0 {
		t.Fatalf("get: %d\n%s", code, out)
	}
	if strings.ContainsAny(out, "\x1b\a") {
		t.Fatalf("get printed raw escapes: %q", out)
	}
	if !strings.Contains(out, `\e]0;pwned\x07\e[31mx`) {
		t.Fatalf("get does not show the escaped name: %q", out)
	}
	for name, reason := range map[string]string{"laughs": "must be a string", "twodocs": "another YAML document", "big": "too large"} {
		if !regexp.MustCompile(`(?m)^` + name + `\s+Invalid\s.*` + reason).MatchString(out) {
			t.Errorf("get does not show %s as Invalid (%s):\n%s", name, reason, out)
		}
	}
	out, _ = runCLI(t, "describe", "--spool", spool, "\x1b]0;pwned\a\x1b[31mx")
	if strings.ContainsAny(out, "\x1b\a") || !strings.Contains(out, `\e]0;pwned`) {
		t.Fatalf("describe printed raw escapes or no name: %q", out)
	}
}
