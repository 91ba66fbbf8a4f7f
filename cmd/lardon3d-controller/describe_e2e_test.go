package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDescribeAgreesWithItselfAndWithGet is built from a user's report of
// describe contradicting itself (issue 33, point 7), on a real controller:
//   - the last batch's items in "Last batch:" and in the batch list are the
//     same range (first..last, as the log header says), while it runs and
//     once it ended;
//   - the Admitted condition names the contract in force: the last batch,
//     of 2 items, has a smaller one than the first batches, and the
//     Contract line, the Admitted message and get's BATCH and MEMORY
//     columns say the same;
//   - a batch whose command is not found is listed as not started, never
//     as running;
//   - a failed batch shows its last lines of output, escaped;
//   - a glob matching nothing shows no "batch 1..0" and "Progress: -" as
//     get's PROGRESS does.
func TestDescribeAgreesWithItselfAndWithGet(t *testing.T) {
	spool := newSpool(t)
	gate := filepath.Join(t.TempDir(), "gate")
	// 20 items in batches of at most 6, evened out to 5: #3 holds items
	// 15..19, and waits for the gate so that it is seen running.
	countPath := writeManifest(t, spool, "count.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'if [ "$LARDON3D_BATCH_START" = 15 ]; then while [ ! -e `+gate+` ]; do sleep 0.05; done; fi']
  items: {count: 20}
  resources:
    fixed: {memory: 20Mi}
    perItem: {memory: 10Mi}
    batch: {max: 6}
    estimate: strict
`)
	writeManifest(t, spool, "nocmd.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [lardon3d-no-such-command, a]
  items: {count: 2}
`)
	writeManifest(t, spool, "fails.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'for i in 1 2 3 4 5 6 7 8; do echo "line $i"; done; printf "fatal: \033[31mboom\n" >&2; exit 3']
  items: {count: 2}
`)
	writeManifest(t, spool, "glob.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'true']
  items: {glob: "`+filepath.Join(t.TempDir(), "*.jpg")+`"}
`)
	c := startController(t, spool, "--exit-when-done")

	describe := func(name string) string {
		t.Helper()
		out, code := runCLI(t, "describe", "--spool", spool, name)
		if code != 0 {
			t.Fatalf("describe %s: exit %d\n%s", name, code, out)
		}
		return out
	}
	// getRow is get's row of a task: NAME PHASE PROGRESS BATCH MEMORY ...
	getRow := func(name string) []string {
		t.Helper()
		out, code := runCLI(t, "get", "--spool", spool, name, "--no-headers")
		f := strings.Fields(out)
		if code != 0 || len(f) < 5 || f[0] != name {
			t.Fatalf("get %s: exit %d\n%s", name, code, out)
		}
		return f
	}
	field := func(out, re string) string {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("describe lacks %s:\n%s", re, out)
		}
		return m[1]
	}
	// The last batch's items, in "Last batch:" and in the list.
	sameRange := func(out, want string) {
		t.Helper()
		last := field(out, `(?m)^Last batch: +#3 items (\S+),`)
		listed := field(out, `(?m)^  #3 +items (\S+) `)
		if last != want || listed != want {
			t.Errorf("last batch: %q in Last batch, %q in the list; want %q in both:\n%s", last, listed, want, out)
		}
	}

	eventually(t, time.Minute, "count's last batch running", func() bool {
		lb := readTask(t, countPath).Status.LastBatch
		return lb != nil && lb.Index == 3 && lb.EndTime == nil
	})
	out := describe("count")
	sameRange(out, "15..19")
	if !regexp.MustCompile(`(?m)^  #3 .*: running$`).MatchString(out) {
		t.Errorf("the running batch is not listed as running:\n%s", out)
	}
	contract := regexp.MustCompile(`(?m)^Contract: +batch (\d+) of (\d+) asked, 1 thread, (\S+) memory`).FindStringSubmatch(out)
	admitted := regexp.MustCompile(`(?m)^  Admitted +True +Admitted +\S+ +batch (\d+) of (\d+) asked, 1 thread, (\S+) reserved$`).FindStringSubmatch(out)
	if contract == nil || admitted == nil || contract[3] != "70.0MiB" || strings.Join(admitted[1:], " ") != strings.Join(contract[1:], " ") {
		t.Errorf("Contract %q and Admitted %q disagree (want batch 5 of 5, 70.0MiB):\n%s", contract, admitted, out)
	}
	if row := getRow("count"); contract != nil && (row[3] != "#3:"+contract[1]+"/"+contract[2] || row[4] != contract[3]) {
		t.Errorf("get says BATCH %s MEMORY %s, describe's contract %q", row[3], row[4], contract)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := c.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d, want 1 (nocmd and fails fail, glob is refused)", code)
	}

	out = describe("count")
	sameRange(out, "15..19")
	if progress, row := field(out, `(?m)^Progress: +(\d+/\d+) items, 4 batches$`), getRow("count"); progress != "20/20" || row[2] != progress {
		t.Errorf("Progress %s, get's PROGRESS %s; want 20/20", progress, row[2])
	}

	out = describe("nocmd")
	if regexp.MustCompile(`(?m)^  #.*: running$`).MatchString(out) || !regexp.MustCompile(`(?m)^  #0 .*attempt 1 at .*: could not start: command "lardon3d-no-such-command" not found`).MatchString(out) ||
		!strings.Contains(out, "CommandNotFound") || strings.Contains(out, "Output:") {
		t.Errorf("a command not found:\n%s", out)
	}

	out = describe("fails")
	want := "Output:        the last 5 of 9 lines of batch #0 attempt 1 (logs fails --batch 0 prints all)\n" +
		"  line 5\n  line 6\n  line 7\n  line 8\n  fatal: \\e[31mboom\n"
	if !strings.Contains(out, want) || strings.Contains(out, "\x1b") {
		t.Errorf("a failed batch's output: want\n%s\nin\n%s", want, out)
	}

	out = describe("glob")
	if strings.Contains(out, "1..0") || !strings.Contains(out, "batch 1..the item count;") ||
		!regexp.MustCompile(`(?m)^Progress: +- \(no items: see the Valid condition\)$`).MatchString(out) || getRow("glob")[2] != "-" {
		t.Errorf("a glob matching nothing (get: %q):\n%s", getRow("glob"), out)
	}
}

// TestDescribeSaysNoControllerServesTheSpool (issue 33, point 2): a task
// in a spool no controller serves is New, as get lists it, with a line
// saying that no controller runs and how to start one, and its declared
// item count rather than 0/0; a status a stopped controller left is
// said to be that.
func TestDescribeSaysNoControllerServesTheSpool(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "four.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'true']
  items: {count: 4}
`)
	writeManifest(t, spool, "left.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'true']
  items: {glob: "*.jpg"}
status:
  phase: Pending
  observedGeneration: 1
  taskName: left
`)
	// The tab-aligned columns, one space wide.
	aligned := regexp.MustCompile(`(?m)^([A-Z][a-z ]+:) +`)
	out, code := runCLI(t, "describe", "--spool", spool, "four")
	out = aligned.ReplaceAllString(out, "$1 ")
	if code != 0 {
		t.Fatalf("describe: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"Phase: New (no controller has read this manifest yet)\n",
		"Generation: not observed yet",
		"Controller: none is running for this spool: the task starts once one serves it (`lardon3d-controller run --spool " + spool + "`",
		"Progress: 0/4 items (as the spec declares them; none run yet)\n",
		"batch 1..4;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe four lacks %q:\n%s", want, out)
		}
	}
	// Not "0/0" alone: a temporary directory's name may hold it.
	for _, bad := range []string{"Phase: -", "0 observed", "Progress: 0/0"} {
		if strings.Contains(out, bad) {
			t.Errorf("describe four says %q:\n%s", bad, out)
		}
	}
	out, _ = runCLI(t, "describe", "--spool", spool, "left")
	out = aligned.ReplaceAllString(out, "$1 ")
	if !strings.Contains(out, "Phase: Pending\n") || !strings.Contains(out, "; the status below is as the last controller left it") || !strings.Contains(out, "Progress: - (items not resolved yet)") {
		t.Errorf("describe left:\n%s", out)
	}
}
