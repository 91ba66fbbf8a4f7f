package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestVerbsTakeSeveralNamesAndSelectors pauses, resumes, gets, describes
// and deletes tasks of a real controller by several names and by -l:
// names all or none, a selector matching nothing said so, the controller
// acting on every task named.
func TestVerbsTakeSeveralNamesAndSelectors(t *testing.T) {
	spool := newSpool(t)
	x1 := writeManifest(t, spool, "x1.yaml", waitTask("x1", "sleep 60", "x"))
	x2 := writeManifest(t, spool, "x2.yaml", waitTask("x2", "sleep 60", "x"))
	y1 := writeManifest(t, spool, "y1.yaml", waitTask("y1", "true", "y"))
	startController(t, spool)
	cli := func(args ...string) (string, int) { return runCLI(t, append(args, "--spool", spool)...) }
	waitRunning(t, x1)
	waitRunning(t, x2)

	if out, code := cli("pause", "x1", "x2"); code != 0 || out != "task x1 paused\ntask x2 paused\n" {
		t.Fatalf("pause x1 x2: exit %d %q", code, out)
	}
	if out, code := cli("wait", "x1", "x2", "--for=phase=Paused"); code != 0 {
		t.Fatalf("x1 x2 not Paused: exit %d %q", code, out)
	}
	// All or none: one unknown name and x1 stays paused.
	if out, code := cli("resume", "x1", "x3"); code != 1 || !strings.HasSuffix(out, `did you mean "x1"?`+"\n") {
		t.Errorf("resume x1 x3: exit %d %q", code, out)
	}
	if !readTask(t, x1).Spec.Paused {
		t.Errorf("a refused resume resumed x1")
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"pause", "-l", "app=none"}, 0, "No resources found\n"},
		{[]string{"pause"}, 2, "error: no task given: name tasks, or select them with -l SELECTOR (or --all where the verb takes it)\n"},
		{[]string{"pause", "x1", "--all"}, 2, "error: a name cannot be given with --all\n"},
		{[]string{"retry", "--all"}, 0, "No resources found\n"}, // none Failed
		{[]string{"get", "y1", "x2", "-o", "name", "--sort-by", "name"}, 0, "task/x2\ntask/y1\n"},
		{[]string{"get", "-l", "app=x", "-o", "name", "--sort-by", "name"}, 0, "task/x1\ntask/x2\n"},
	} {
		if out, code := cli(c.args...); code != c.code || out != c.want {
			t.Errorf("%v: exit %d %q; want exit %d %q", c.args, code, out, c.code, c.want)
		}
	}
	out, code := cli("describe", "x2", "y1")
	if code != 0 || !regexp.MustCompile(`(?s)^Name: +x2\n.*Phase: +Paused\n.*\n\nName: +y1\n`).MatchString(out) {
		t.Errorf("describe x2 y1: exit %d\n%s", code, out)
	}
	if out, code := cli("describe", "-l", "app=y"); code != 0 || strings.Count(out, "Name:") != 1 || !strings.HasPrefix(out, "Name:") {
		t.Errorf("describe -l app=y: exit %d\n%s", code, out)
	}

	if out, code := cli("resume", "-l", "app=x"); code != 0 || out != "task x1 resumed\ntask x2 resumed\n" {
		t.Fatalf("resume -l app=x: exit %d %q", code, out)
	}
	if out, code := cli("wait", "-l", "app=x", "--for=phase=Running"); code != 0 {
		t.Fatalf("x not Running again: exit %d %q", code, out)
	}
	if out, code := cli("delete", "-l", "app=x"); code != 0 || out != "task x1 deleted (x1.yaml)\ntask x2 deleted (x2.yaml)\n" {
		t.Fatalf("delete -l app=x: exit %d %q", code, out)
	}
	// Their reservations given back, y1 runs.
	eventually(t, 30*time.Second, "y1 Done", func() bool { return phaseOf(t, y1) == v1alpha1.PhaseDone })
	if out, code := cli("get", "-o", "name"); code != 0 || out != "task/y1\n" {
		t.Errorf("get after delete -l: exit %d %q", code, out)
	}
}
