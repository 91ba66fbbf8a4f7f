package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
)

// spoolsOfOneMachine makes n spools side by side: controllers started on
// any of them share one isolated machine (registry and history).
func spoolsOfOneMachine(t *testing.T, n int) []string {
	t.Helper()
	base := t.TempDir()
	var out []string
	for i := range n {
		dir := filepath.Join(base, fmt.Sprintf("spool%d", i+1))
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		out = append(out, dir)
	}
	return out
}

// A second controller on the machine is refused, naming the first's PID
// and spools; the verbs say which controller serves a spool, and that
// none serves another, with the command that starts one.
func TestASecondControllerOnTheMachineIsRefused(t *testing.T) {
	sp := spoolsOfOneMachine(t, 3)
	writeManifest(t, sp[0], "long.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: long}\nspec:\n  command: [sleep, '30']\n  items: {count: 1}\n")
	writeManifest(t, sp[2], "idle.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: idle}\nspec:\n  command: ['true']\n  items: {count: 1}\n")
	first := startController(t, sp[0], "--spool", sp[1])
	eventually(t, 20*time.Second, "the first controller serving", func() bool { return strings.Contains(first.stderr.String(), `"serving"`) })
	pid := strconv.Itoa(first.cmd.Process.Pid)

	out, code := runCLI(t, "run", "--spool", sp[2], "--exit-when-done")
	if code != 2 || !strings.Contains(out, "pid "+pid) || !strings.Contains(out, sp[0]) || !strings.Contains(out, sp[1]) {
		t.Errorf("second controller: exit %d, want 2 naming pid %s and its spools:\n%s", code, pid, out)
	}
	if phaseOf(t, filepath.Join(sp[2], "idle.yaml")) != "" {
		t.Errorf("the refused controller touched its spool")
	}
	out, code = runCLI(t, "run", "--spool", sp[2], "--share")
	if code != 2 || !strings.Contains(out, "--memory-capacity") {
		t.Errorf("--share without a capacity: exit %d:\n%s", code, out)
	}
	out, code = runCLI(t, "run", "--spool", sp[2], "--share", "--memory-capacity", "1Gi", "--exit-when-done")
	if code != 2 || !strings.Contains(out, "pid "+pid) {
		t.Errorf("--share beside a controller that does not share: exit %d:\n%s", code, out)
	}

	eventually(t, 20*time.Second, "long running", func() bool { return phaseOf(t, filepath.Join(sp[0], "long.yaml")) == v1alpha1.PhaseRunning })
	out, code = runCLI(t, "describe", "long", "--spool", sp[0])
	if code != 0 || !strings.Contains(out, "Controller:") || !strings.Contains(out, "pid "+pid) {
		t.Errorf("describe on a served spool (exit %d):\n%s", code, out)
	}
	out, code = runCLI(t, "get", "--spool", sp[0])
	if code != 0 || strings.Contains(out, "no controller") {
		t.Errorf("get on a served spool (exit %d):\n%s", code, out)
	}
	out, code = runCLI(t, "get", "--spool", sp[2])
	if code != 0 || !strings.Contains(out, "no controller is running on "+sp[2]) || !strings.Contains(out, "lardon3d-controller run --spool "+sp[2]) {
		t.Errorf("get on a spool nobody serves (exit %d):\n%s", code, out)
	}
	out, code = runCLI(t, "describe", "idle", "--spool", sp[2])
	if code != 0 || !strings.Contains(out, "none is running for this spool") || !strings.Contains(out, "not observed yet") {
		t.Errorf("describe on a spool nobody serves (exit %d):\n%s", code, out)
	}

	// Once the first is gone (kill -9: its claim is stale), a new one starts.
	_ = first.cmd.Process.Signal(syscall.SIGKILL)
	<-first.done
	out, code = runCLI(t, "run", "--spool", sp[2], "--exit-when-done", "--load-threshold", "-1")
	if code != 0 || phaseOf(t, filepath.Join(sp[2], "idle.yaml")) != v1alpha1.PhaseDone {
		t.Errorf("after the first was killed: exit %d:\n%s", code, out)
	}
}

// Two controllers that say --share run side by side when their
// capacities fit in the machine's memory, and a third that does not fit is
// refused with the numbers.
func TestSharingControllersMustFitTheMachine(t *testing.T) {
	sp := spoolsOfOneMachine(t, 3)
	var mem syscall.Sysinfo_t
	if err := syscall.Sysinfo(&mem); err != nil {
		t.Fatal(err)
	}
	total := int64(mem.Totalram) * int64(mem.Unit)
	third := fmt.Sprintf("%dMi", total/3>>20)
	a := startController(t, sp[0], "--share", "--memory-capacity", third)
	eventually(t, 20*time.Second, "the first serving", func() bool { return strings.Contains(a.stderr.String(), `"serving"`) })
	b := startController(t, sp[1], "--share", "--memory-capacity", third)
	eventually(t, 20*time.Second, "the second serving", func() bool { return strings.Contains(b.stderr.String(), `"serving"`) })
	half := fmt.Sprintf("%dMi", total/2>>20)
	out, code := runCLI(t, "run", "--spool", sp[2], "--share", "--memory-capacity", half)
	if code != 2 || !strings.Contains(out, "the machine has") {
		t.Errorf("a third sharing controller that does not fit: exit %d:\n%s", code, out)
	}
}

// One controller serving two spools shares one memory budget and one
// queue: tasks of 700Mi each under a 1Gi capacity never run at once,
// whichever spool they come from (two controllers, one per spool, would
// run one of each at once: 1.4Gi reserved of a 1Gi machine).
func TestOneControllerServesTwoSpoolsWithoutOvercommit(t *testing.T) {
	sp := spoolsOfOneMachine(t, 2)
	spans := filepath.Join(filepath.Dir(sp[0]), "spans")
	for i, dir := range sp {
		for _, name := range []string{"a", "b"} {
			tag := fmt.Sprintf("s%d-%s", i+1, name)
			writeManifest(t, dir, name+".yaml", fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s}
spec:
  command: [sh, -c, 'echo %s start $(date +%%s%%N) >> %s; sleep 0.3; echo %s end $(date +%%s%%N) >> %s']
  items: {count: 1}
  resources: {fixed: {memory: 700Mi}}
`, name, tag, spans, tag, spans))
		}
	}
	c := startController(t, sp[0], "--spool", sp[1], "--exit-when-done", "--memory-capacity", "1Gi", "--memory-reserved", "-1")
	if code := c.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	type mark struct {
		what string
		at   int64
	}
	var marks []mark
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, spans)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("span line %q", line)
		}
		at, _ := strconv.ParseInt(f[2], 10, 64)
		marks = append(marks, mark{f[1], at})
	}
	sort.Slice(marks, func(i, j int) bool { return marks[i].at < marks[j].at })
	if len(marks) != 8 {
		t.Fatalf("%d marks, want 8: %v", len(marks), marks)
	}
	for i, m := range marks {
		if want := []string{"start", "end"}[i%2]; m.what != want {
			t.Fatalf("two 700Mi tasks ran at once under a 1Gi capacity: %v", marks)
		}
	}
}

// The learned history is the machine's: a profile learned on one spool
// sizes the first batch of a task of that profile on another spool of the
// same controller (not the provisional quarter of the memory that a
// profile never seen gets).
func TestSpoolsOfOneControllerShareTheLearnedHistory(t *testing.T) {
	sp := spoolsOfOneMachine(t, 2)
	for i := range 4 {
		writeManifest(t, sp[0], fmt.Sprintf("a%d.yaml", i), synthTask(fmt.Sprintf("a%d", i), 16, ""))
	}
	args := []string{"--spool", sp[1], "--exit-when-done", "--memory-capacity", "4Gi"}
	if code := startController(t, sp[0], args...).wait(t, 4*time.Minute); code != 0 {
		t.Fatalf("first run: exit code %d", code)
	}
	writeManifest(t, sp[1], "b.yaml", synthTask("b", 16, ""))
	if code := startController(t, sp[0], args...).wait(t, 4*time.Minute); code != 0 {
		t.Fatalf("second run: exit code %d", code)
	}
	all := testHistory(t, sp[0])
	var first *history.Record
	for _, r := range all["custom/lardon3d-synth"] {
		if r.Task == "b" && (first == nil || r.Time.Before(first.Time)) {
			first = &r
		}
	}
	if first == nil {
		t.Fatalf("no batch of b in the machine's history (profiles %v)", keysOf(all))
	}
	// A provisional quarter of 4Gi would reserve 1 GiB for a peak near
	// 300 MiB; learned, the reservation is within 1.25× the peak. How many
	// items the batch takes is the sizing policy's (a learned duration
	// model may split the 16 evenly when that is faster).
	ratio := float64(first.LimitBytes) / float64(max(first.PeakMemoryBytes, 1))
	if ratio < 1 || ratio > 1.25 {
		t.Errorf("b's first batch: %d items, reserved %d MiB for a peak of %d MiB (ratio %.2f): want the reservation within 1.25× the peak, sized from spool1's batches",
			first.Items, first.LimitBytes>>20, first.PeakMemoryBytes>>20, ratio)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// As root, one controller serves the spools of two users and runs each
// task as the spool's owner: `id -u` in the batch is the owner's, the
// files it makes are theirs, HOME is theirs. A root-owned manifest in a
// user's spool runs as the user too; one owned by a third user is refused,
// never run; one whose items only root may read is Rejected. The users
// are nobody (65534, in the passwd database) and uid 4242 (not in it).
func TestRootRunsEachTaskAsItsSpoolOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the controller changes credentials (CI runs as root)")
	}
	sp := spoolsOfOneMachine(t, 2)
	base := filepath.Dir(sp[0])
	// The users reach their spools (t.TempDir makes 0700 directories).
	for d := base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The machine's state directory as a run that kept only the history
	// left it: 0700. The users' state directories are made below it.
	if err := os.Mkdir(filepath.Join(base, "machine-state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(base, "machine-state", "lardon3d"), 0o700); err != nil {
		t.Fatal(err)
	}
	owners := []uint32{65534, 4242}
	task := func(name string) string {
		return fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s}
spec:
  command: [sh, -c, 'id -u > %s.uid; echo "$HOME" > %s.home; cat "$LARDON3D_ITEMS_FILE" >> %s.items']
  items: {count: 2}
`, name, name, name, name)
	}
	for i, dir := range sp {
		uid := owners[i]
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
		mine := writeManifest(t, dir, "mine.yaml", task("mine"))
		if err := os.Chown(mine, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
		writeManifest(t, dir, "roots.yaml", task("roots")) // root's own file
		// Items only root may read: the owner's task never gets them.
		secret := filepath.Join(base, fmt.Sprintf("secret%d", i))
		if err := os.WriteFile(secret, []byte("root's"), 0o600); err != nil {
			t.Fatal(err)
		}
		peek := writeManifest(t, dir, "peek.yaml", strings.Replace(task("peek"), "items: {count: 2}", "items: {files: ["+secret+"]}", 1))
		if err := os.Chown(peek, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
		// A glob over a directory only root may list: globbed as the
		// user, it finds nothing, and nothing of it reaches the status.
		private := filepath.Join(base, fmt.Sprintf("private%d", i))
		if err := os.Mkdir(private, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(private, "hidden-name.jpg"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		glob := writeManifest(t, dir, "glob.yaml", strings.Replace(task("glob"), "items: {count: 2}", "items: {glob: '"+private+"/*'}", 1))
		if err := os.Chown(glob, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
		other := writeManifest(t, dir, "other.yaml", task("other"))
		if err := os.Chown(other, 4343, 4343); err != nil {
			t.Fatal(err)
		}
	}
	c := startController(t, sp[0], "--spool", sp[1], "--exit-when-done", "--wait-for-tasks", "8")
	c.wait(t, 2*time.Minute)
	for i, dir := range sp {
		uid := owners[i]
		if p := phaseOf(t, filepath.Join(dir, "mine.yaml")); p != v1alpha1.PhaseDone {
			t.Fatalf("%s/mine.yaml: phase %q\n%s", dir, p, tail(c.stderr.String(), 4000))
		}
		if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "mine.uid"))); got != strconv.Itoa(int(uid)) {
			t.Errorf("%s: the owner's task ran as uid %s, want %d", dir, got, uid)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, "mine.uid"), &st); err != nil || st.Uid != uid {
			t.Errorf("%s: the file the task made belongs to uid %d, want %d (%v)", dir, st.Uid, uid, err)
		}
		wantHome := "/"
		if uid == 65534 {
			wantHome = "/nonexistent"
		}
		if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "mine.home"))); got != wantHome {
			t.Errorf("%s: HOME %q, want %q", dir, got, wantHome)
		}
		if got := strings.Fields(readFile(t, filepath.Join(dir, "mine.items"))); len(got) != 2 {
			t.Errorf("%s: the task read items %q, want its 2", dir, got)
		}
		// A root-owned manifest in a user's spool (planted, as far as
		// root can tell) runs as the user too.
		if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "roots.uid"))); got != strconv.Itoa(int(uid)) {
			t.Errorf("%s: a root-owned manifest in the user's spool ran as uid %s, want the user's %d", dir, got, uid)
		}
		if _, err := os.Stat(filepath.Join(dir, "other.uid")); err == nil {
			t.Errorf("%s: a manifest of a third user ran", dir)
		}
		if p := phaseOf(t, filepath.Join(dir, "peek.yaml")); p != v1alpha1.PhaseRejected {
			t.Errorf("%s: a task of items only root may read: phase %q, want Rejected", dir, p)
		}
		if _, err := os.Stat(filepath.Join(dir, "peek.uid")); err == nil {
			t.Errorf("%s: a task of items only root may read ran", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, "glob.uid")); err == nil {
			t.Errorf("%s: a task globbing a directory only root may list ran", dir)
		}
		if g := readFile(t, filepath.Join(dir, "glob.yaml")); strings.Contains(g, "hidden-name") || strings.Contains(g, "not readable") {
			// "1 of 1 items are not readable" would tell the user that
			// the directory holds a file: the glob must find nothing.
			t.Errorf("%s: what only root may list reached the user's status:\n%s", dir, g)
		}
		// The spool's state is out of the owner's reach: not in the spool.
		if _, err := os.Stat(filepath.Join(dir, ".lardon3d")); err == nil {
			t.Errorf("%s: root kept the state of a user's spool inside it", dir)
		}
		// The owner reads the task's log through the verbs.
		if out, code := runCLI(t, "logs", "mine", "--spool", dir); code != 0 || !strings.Contains(out, "=== batch 0") {
			t.Errorf("%s: logs (exit %d):\n%s", dir, code, out)
		}
	}
}

// A spool created after the controller started, under a pattern it
// serves (as the system service's /home/*/lardon3d/spool), is served
// within the rescan interval, without a restart, and the registry says so.
func TestASpoolMatchingAPatternLaterIsServed(t *testing.T) {
	// The spools are side by side (one isolated machine for the test's
	// controller and verbs): base/alice, then base/bob.
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "alice"), 0o700); err != nil {
		t.Fatal(err)
	}
	// startController serves its first argument: the pattern.
	c := startController(t, filepath.Join(base, "*"))
	eventually(t, 20*time.Second, "serving", func() bool { return strings.Contains(c.stderr.String(), `"serving"`) })
	bob := filepath.Join(base, "bob")
	if err := os.Mkdir(bob, 0o700); err != nil {
		t.Fatal(err)
	}
	// A match that is a symbolic link (to a directory the pattern does not
	// cover) is not served.
	elsewhere := t.TempDir()
	hidden := writeManifest(t, elsewhere, "h.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: h}\nspec:\n  command: ['true']\n  items: {count: 1}\n")
	if err := os.Symlink(elsewhere, filepath.Join(base, "eve")); err != nil {
		t.Fatal(err)
	}
	path := writeManifest(t, bob, "t.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec:\n  command: ['true']\n  items: {count: 1}\n")
	eventually(t, rescanEvery+15*time.Second, "bob's task Done", func() bool { return phaseOf(t, path) == v1alpha1.PhaseDone })
	out, code := runCLI(t, "describe", "t", "--spool", bob)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("pid %d", c.cmd.Process.Pid)) {
		t.Errorf("describe on the spool served later (exit %d):\n%s", code, out)
	}
	if p := phaseOf(t, hidden); p != "" {
		t.Errorf("a manifest reached through a symlinked match ran: %s", p)
	}
	if !strings.Contains(c.stderr.String(), "reached through a symbolic link") {
		t.Errorf("the symlinked match is not reported in the log")
	}
}

// A spool lost while others are served (its directory moved away) stops
// alone: the controller serves the others on.
func TestALostSpoolStopsAlone(t *testing.T) {
	sp := spoolsOfOneMachine(t, 2)
	c := startController(t, sp[0], "--spool", sp[1])
	// Both spools watched: listed.
	eventually(t, 20*time.Second, "both spools listed", func() bool { return strings.Count(c.stderr.String(), `"spool listed"`) == 2 })
	if err := os.Rename(sp[1], sp[1]+".moved"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the loss logged", func() bool { return strings.Contains(c.stderr.String(), "is not watched any more") })
	path := writeManifest(t, sp[0], "after.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: after}\nspec:\n  command: ['true']\n  items: {count: 1}\n")
	eventually(t, 20*time.Second, "the other spool's new task Done", func() bool { return phaseOf(t, path) == v1alpha1.PhaseDone })
	select {
	case <-c.done:
		t.Fatalf("the controller exited (%d) when one of its spools was lost", c.code)
	default:
	}
}
