package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// twoOwnerSpools makes two spools of one machine, the first root's
// (alice's, as far as the controller can tell: account "root"), the
// second uid 65534's (bob's: "nobody"), reachable by their owners.
func twoOwnerSpools(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: a spool of another owner (CI runs as root)")
	}
	sp := spoolsOfOneMachine(t, 2)
	for d := filepath.Dir(sp[0]); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sp[1], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(sp[1], 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return sp
}

// sleeper is a task of one batch of 2 s reserving mem.
func sleeper(name, mem string) string {
	return fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: %s}\nspec:\n  command: [sleep, '2']\n  items: {count: 1}\n  resources: {fixed: {memory: %s}}\n", name, mem)
}

// The scenario of issue 58: one controller serves alice's spool and
// bob's, a 4Gi budget, tasks of 2Gi. Alice drops 30 tasks of 2 s, bob one
// a moment later: bob's task starts within one batch length of alice's
// (2 s; at most 4 s after the controller first read it, by the statuses'
// times), not after alice's 30 (a minute in arrival order), and alice's
// tasks never hold more than the budget with it.
func TestFairShareBobIsNotQueuedBehindAlicesFlood(t *testing.T) {
	sp := twoOwnerSpools(t)
	c := startController(t, sp[0], "--spool", sp[1], "--memory-capacity", "4Gi", "--memory-reserved", "-1")
	eventually(t, 20*time.Second, "the controller serving", func() bool { return strings.Contains(c.stderr.String(), `"serving"`) })
	for i := range 30 {
		writeManifest(t, sp[0], fmt.Sprintf("alice-%02d.yaml", i), sleeper(fmt.Sprintf("alice-%02d", i), "2Gi"))
	}
	eventually(t, 30*time.Second, "alice's first tasks running", func() bool {
		return phaseOf(t, filepath.Join(sp[0], "alice-00.yaml")) == v1alpha1.PhaseRunning
	})
	time.Sleep(500 * time.Millisecond) // "a moment later"
	bob := writeManifest(t, sp[1], "bob.yaml", sleeper("bob", "2Gi"))
	if err := os.Chown(bob, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "bob's task done", func() bool { return phaseOf(t, bob) == v1alpha1.PhaseDone })
	st := readTask(t, bob).Status
	if st.CreationTime == nil || st.StartTime == nil {
		t.Fatalf("bob's status without its times: %+v", st)
	}
	waited := st.StartTime.Sub(st.CreationTime.Time)
	t.Logf("bob's task started %s after it was read", waited)
	if waited > 4*time.Second {
		t.Errorf("bob's task started %s after it was read, want within one batch of alice's (<= 4s)", waited)
	}
	var aliceDone int
	for i := range 30 {
		if phaseOf(t, filepath.Join(sp[0], fmt.Sprintf("alice-%02d.yaml", i))) == v1alpha1.PhaseDone {
			aliceDone++
		}
	}
	if aliceDone > 10 {
		t.Errorf("%d of alice's 30 tasks were done when bob's was: bob waited behind alice's flood", aliceDone)
	}
	// Never more than the budget: 2 tasks of 2Gi at once, whoever's.
	out, code := runCLI(t, "shares", "--spool", sp[0])
	if code != 0 || !strings.Contains(out, "root *") || !strings.Contains(out, "ACCOUNT") {
		t.Errorf("shares (exit %d):\n%s", code, out)
	}
	// describe says where alice's account stands, with the numbers.
	out, code = runCLI(t, "describe", "alice-29", "--spool", sp[0])
	if code != 0 || !strings.Contains(out, "Fair share:") || !strings.Contains(out, "root's share: ") || !strings.Contains(out, "usage half-life 1h") {
		t.Errorf("describe alice-29 (exit %d):\n%s", code, out)
	}
}

// A quota caps an account: with runningTasks 1 and memory 3Gi for root,
// one of its 2Gi tasks runs at a time, and get and describe say that the
// others wait for the quota, with the numbers; shares lists the account.
func TestQuotaHoldsAnAccountAndGetSaysWhy(t *testing.T) {
	sp := spoolsOfOneMachine(t, 1)
	cfg := filepath.Join(filepath.Dir(sp[0]), "quota.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("accounts: {%q: team}\nquotas: {team: {memory: 3Gi}}\nshares: {team: 3}\n", sp[0])), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		writeManifest(t, sp[0], fmt.Sprintf("q%d.yaml", i), strings.Replace(sleeper(fmt.Sprintf("q%d", i), "2Gi"), "'2'", "'3'", 1))
	}
	c := startController(t, sp[0], "--config", cfg, "--memory-capacity", "8Gi", "--memory-reserved", "-1")
	eventually(t, 20*time.Second, "q0 running", func() bool { return phaseOf(t, filepath.Join(sp[0], "q0.yaml")) == v1alpha1.PhaseRunning })
	var msg string
	eventually(t, 10*time.Second, "q1 waiting for the quota", func() bool {
		st := readTask(t, filepath.Join(sp[0], "q1.yaml")).Status
		for _, cnd := range st.Conditions {
			if cnd.Reason == "Quota" {
				msg = cnd.Message
				return true
			}
		}
		return false
	})
	if !strings.Contains(msg, "team's quota: memory 2.0GiB held + 2.0GiB asked > 3.0GiB") {
		t.Errorf("q1's message: %q", msg)
	}
	if p := phaseOf(t, filepath.Join(sp[0], "q1.yaml")); p != v1alpha1.PhasePending {
		t.Errorf("q1: %s, want Pending under the quota", p)
	}
	out, code := runCLI(t, "get", "--spool", sp[0])
	if code != 0 || !strings.Contains(out, "Quota") {
		t.Errorf("get (exit %d) does not say Quota:\n%s", code, out)
	}
	out, code = runCLI(t, "describe", "q1", "--spool", sp[0])
	if code != 0 || !strings.Contains(out, "team's quota") {
		t.Errorf("describe (exit %d) does not say the quota:\n%s", code, out)
	}
	eventually(t, 10*time.Second, "shares published", func() bool {
		out, code = runCLI(t, "shares", "--spool", sp[0])
		return code == 0 && strings.Contains(out, "team")
	})
	if !strings.Contains(out, "ACCOUNT") || !strings.Contains(out, "2.0GiB") {
		t.Errorf("shares:\n%s", out)
	}
	_ = c
}

// A running task competes again at its sequence break: alice's two tasks
// of three 4 s batches hold the 4Gi budget; bob's task, dropped while
// their first batches run, starts at alice's next boundary (within one
// batch length), not after alice's tasks; no batch of alice is killed
// (both end Done with their 3 items, no retry).
func TestFairShareBobStartsAtAlicesNextBoundary(t *testing.T) {
	sp := twoOwnerSpools(t)
	long := func(name string) string {
		return fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: %s}\nspec:\n  command: [sleep, '4']\n  items: {count: 3}\n  resources: {fixed: {memory: 2Gi}, batch: {min: 1, max: 1}}\n", name)
	}
	writeManifest(t, sp[0], "a1.yaml", long("a1"))
	writeManifest(t, sp[0], "a2.yaml", long("a2"))
	c := startController(t, sp[0], "--spool", sp[1], "--memory-capacity", "4Gi", "--memory-reserved", "-1")
	eventually(t, 30*time.Second, "alice's tasks running", func() bool {
		return phaseOf(t, filepath.Join(sp[0], "a1.yaml")) == v1alpha1.PhaseRunning && phaseOf(t, filepath.Join(sp[0], "a2.yaml")) == v1alpha1.PhaseRunning
	})
	time.Sleep(time.Second)
	bob := writeManifest(t, sp[1], "bob.yaml", sleeper("bob", "2Gi"))
	if err := os.Chown(bob, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "bob's task done", func() bool { return phaseOf(t, bob) == v1alpha1.PhaseDone })
	st := readTask(t, bob).Status
	waited := st.StartTime.Sub(st.CreationTime.Time)
	t.Logf("bob's task started %s after it was read", waited)
	if waited > 5*time.Second {
		t.Errorf("bob's task started %s after it was read, want at alice's next boundary (batches of 4 s)", waited)
	}
	for _, f := range []string{"a1.yaml", "a2.yaml"} {
		path := filepath.Join(sp[0], f)
		eventually(t, 60*time.Second, f+" done", func() bool { return phaseOf(t, path) == v1alpha1.PhaseDone })
		a := readTask(t, path).Status
		if a.Progress.ItemsDone != 3 || a.Progress.BatchesDone != 3 {
			t.Errorf("%s: %+v, want its 3 batches, none lost", f, a.Progress)
		}
		if !a.StartTime.Before(st.StartTime) || !a.CompletionTime.After(st.StartTime.Time) {
			t.Errorf("%s ran %s-%s, bob started %s: bob should start between alice's batches", f, a.StartTime, a.CompletionTime, st.StartTime)
		}
	}
	_ = c
}

// Priorities from the configuration's classes: a task of class high,
// dropped after two of the default class low, runs before them; a class
// the configuration does not name is rejected with the nearest one.
func TestPriorityClassesOrderTheQueue(t *testing.T) {
	sp := spoolsOfOneMachine(t, 1)
	cfg := filepath.Join(filepath.Dir(sp[0]), "prio.yaml")
	if err := os.WriteFile(cfg, []byte("priorityClasses: {high: 1000, low: -100}\ndefaultPriority: low\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, sp[0], "first.yaml", sleeper("first", "2Gi"))
	c := startController(t, sp[0], "--config", cfg, "--memory-capacity", "2Gi", "--memory-reserved", "-1")
	eventually(t, 20*time.Second, "first running", func() bool { return phaseOf(t, filepath.Join(sp[0], "first.yaml")) == v1alpha1.PhaseRunning })
	writeManifest(t, sp[0], "l1.yaml", sleeper("l1", "2Gi"))
	writeManifest(t, sp[0], "l2.yaml", sleeper("l2", "2Gi"))
	writeManifest(t, sp[0], "typo.yaml", sleeper("typo", "2Gi")+"  priority: hihg\n")
	eventually(t, 10*time.Second, "l1 and l2 read", func() bool {
		return phaseOf(t, filepath.Join(sp[0], "l2.yaml")) == v1alpha1.PhasePending && phaseOf(t, filepath.Join(sp[0], "l1.yaml")) == v1alpha1.PhasePending
	})
	writeManifest(t, sp[0], "h1.yaml", sleeper("h1", "2Gi")+"  priority: high\n")
	eventually(t, 30*time.Second, "h1 running", func() bool { return phaseOf(t, filepath.Join(sp[0], "h1.yaml")) == v1alpha1.PhaseRunning })
	for _, f := range []string{"l1.yaml", "l2.yaml"} {
		if p := phaseOf(t, filepath.Join(sp[0], f)); p != v1alpha1.PhasePending {
			t.Errorf("%s is %s while h1 (priority high, dropped later) runs: want Pending", f, p)
		}
	}
	typo := readTask(t, filepath.Join(sp[0], "typo.yaml")).Status
	if typo.Phase != v1alpha1.PhaseRejected || !strings.Contains(fmt.Sprint(typo.Conditions), `no priority class "hihg" (did you mean high?`) {
		t.Errorf("typo: %s %+v", typo.Phase, typo.Conditions)
	}
	_ = c
}
