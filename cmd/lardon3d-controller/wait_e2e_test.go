package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitTask is a task whose command is cmd, labelled app: app.
func waitTask(name, cmd, app string) string {
	return fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s, labels: {app: %s}}
spec:
  command: [sh, -c, %q]
  items: {count: 1}
  resources: {threads: 1}
`, name, app, cmd)
}

// timedCLI is runCLI with how long the verb took.
func timedCLI(t *testing.T, args ...string) (string, int, time.Duration) {
	t.Helper()
	start := time.Now()
	out, code := runCLI(t, args...)
	return out, code, time.Since(start)
}

// exited waits up to within for a verb started by startCLI to exit, and
// returns its output and exit code.
func exited(t *testing.T, out *syncBuffer, done <-chan int, within time.Duration) (string, int) {
	t.Helper()
	select {
	case code := <-done:
		return out.String(), code
	case <-time.After(within):
		t.Fatalf("still running after %s: %q", within, out.String())
		return "", -1
	}
}

// TestWaitMeetsTimesOutAndFailsFast runs wait against a real controller:
// kubectl's messages and exit codes, a timeout that is kept, a Failed task
// that fails a wait for Done at once, and a retried one that does not (its
// status is for the spec before the retry).
func TestWaitMeetsTimesOutAndFailsFast(t *testing.T) {
	spool := newSpool(t)
	quick := writeManifest(t, spool, "quick.yaml", waitTask("quick", "true", "a"))
	writeManifest(t, spool, "slow.yaml", waitTask("slow", "sleep 60", "a"))
	flaky := writeManifest(t, spool, "flaky.yaml", waitTask("flaky", "test -f ok-flag", "b"))
	writeManifest(t, spool, "held.yaml", waitTask("held", "true", "b")+"  paused: true\n")
	startController(t, spool)
	wait := func(args ...string) (string, int, time.Duration) {
		return timedCLI(t, append([]string{"wait", "--spool", spool}, args...)...)
	}

	if out, code, _ := wait("quick", "--for=phase=Done"); code != 0 || out != "task/quick condition met\n" {
		t.Fatalf("wait quick --for=phase=Done: exit %d %q", code, out)
	}
	if out, code, _ := wait("task/quick", "--for", "condition=complete", "--timeout=0"); code != 0 || out != "task/quick condition met\n" {
		t.Errorf("wait --for=condition=complete: exit %d %q", code, out)
	}
	// Done is final: a wait for Complete=False fails at once.
	out, code, took := wait("quick", "--for=condition=Complete=False", "--timeout=1m")
	if code != 1 || took > 10*time.Second || !strings.HasPrefix(out, "error: task/quick is Done (Completed: 1 item done in 1 batch), a final phase, and its condition Complete is not False: it never will unless") {
		t.Errorf("wait for Complete=False on a Done task: exit %d after %s %q", code, took, out)
	}

	// The timeout is kept, and said as kubectl says it.
	out, code, took = wait("slow", "quick", "--for=phase=Done", "--timeout=1500ms")
	if code != 1 || out != "task/quick condition met\nerror: timed out waiting for the condition on task/slow\n" {
		t.Errorf("wait slow quick: exit %d %q", code, out)
	}
	if took < 1500*time.Millisecond || took > 8*time.Second {
		t.Errorf("wait --timeout=1500ms took %s", took)
	}

	// A Failed task cannot become Done: said at once, not after a minute.
	eventually(t, 30*time.Second, "flaky Failed", func() bool { return phaseOf(t, flaky) == "Failed" })
	out, code, took = wait("flaky", "--for=phase=Done", "--timeout=1m")
	if code != 1 || took > 10*time.Second || !strings.HasPrefix(out, "error: task/flaky is Failed (") || !strings.Contains(out, "a final phase, and not Done: it never will unless its spec is edited or it is retried\n") {
		t.Errorf("wait for Done on a Failed task: exit %d after %s %q", code, took, out)
	}
	// Retried: the Failed status is for the spec before the retry, and
	// wait waits for the new generation instead of judging the old one.
	if err := os.WriteFile(filepath.Join(spool, "ok-flag"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := runCLI(t, "retry", "--spool", spool, "flaky"); code != 0 {
		t.Fatalf("retry: exit %d %q", code, out)
	}
	if out, code, _ := wait("flaky", "--for=phase=Done"); code != 0 || out != "task/flaky condition met\n" {
		t.Errorf("wait for a retried task: exit %d %q", code, out)
	}

	// Waiting follows the spool: a paused task, resumed while waited for.
	heldOut, heldDone := startCLI(t, "wait", "--spool", spool, "-l", "app=b", "--for=phase=Done", "--timeout=1m")
	select {
	case code := <-heldDone:
		t.Fatalf("wait -l app=b returned before held was resumed: exit %d %q", code, heldOut.String())
	case <-time.After(time.Second):
	}
	if out, code := runCLI(t, "resume", "--spool", spool, "held"); code != 0 {
		t.Fatalf("resume: exit %d %q", code, out)
	}
	if out, code := exited(t, heldOut, heldDone, 30*time.Second); code != 0 || out != "task/flaky condition met\ntask/held condition met\n" {
		t.Errorf("wait -l app=b: exit %d %q", code, out)
	}

	// --for=delete: met when the manifest goes; a name that is not there
	// is deleted already.
	delOut, delDone := startCLI(t, "wait", "--spool", spool, "slow", "gone", "--for=delete")
	time.Sleep(300 * time.Millisecond)
	if out, code := runCLI(t, "delete", "--spool", spool, "slow"); code != 0 {
		t.Fatalf("delete: exit %d %q", code, out)
	}
	// (slow first if wait read the spool after the delete)
	if out, code := exited(t, delOut, delDone, 20*time.Second); code != 0 || len(out) != len("task/gone condition met\ntask/slow condition met\n") ||
		!strings.Contains(out, "task/gone condition met\n") || !strings.Contains(out, "task/slow condition met\n") {
		t.Errorf("wait --for=delete: exit %d %q", code, out)
	}

	// What kubectl refuses, and a selector that selects nothing.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--for=phase=Done"}, 2, "error: no task given"},
		{[]string{"quick", "--for=phase=Finished"}, 2, "error: --for=phase=Finished: want a phase among Pending, Reserved, Running, Paused, Done, Failed, Rejected\n"},
		{[]string{"quick", "--for=ready"}, 2, `error: --for="ready": want phase=PHASE, condition=TYPE[=STATUS] or delete`},
		{[]string{"quick", "-l", "app=a", "--for=phase=Done"}, 2, "error: a name cannot be given with a selector (-l)"},
		{[]string{"-l", "app=none", "--for=phase=Done"}, 1, "error: no matching resources found\n"},
		{[]string{"quik", "--for=phase=Done"}, 1, `did you mean "quick"?`},
	} {
		out, code, _ := wait(c.args...)
		if code != c.code || !strings.HasPrefix(out, c.want) && !strings.HasSuffix(out, c.want+"\n") {
			t.Errorf("wait %v: exit %d %q; want exit %d, %q", c.args, code, out, c.code, c.want)
		}
	}
	if data, err := os.ReadFile(quick); err != nil || !strings.Contains(string(data), "phase: Done") {
		t.Errorf("quick.yaml after the waits: %v\n%s", err, data)
	}
}

// TestWaitWithoutAControllerTimesOutAndSaysSo: --timeout=0 checks once;
// a task no controller serves times out with the hint to start one.
func TestWaitWithoutAControllerTimesOutAndSaysSo(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "lone.yaml", waitTask("lone", "true", "a"))
	out, code, took := timedCLI(t, "wait", "--spool", spool, "lone", "--for=phase=Done", "--timeout=0")
	if code != 1 || took > 5*time.Second || !strings.HasPrefix(out, "error: timed out waiting for the condition on task/lone\nno controller is running on ") {
		t.Fatalf("wait --timeout=0: exit %d after %s %q", code, took, out)
	}
	// The manifests are the truth, controller or not.
	writeManifest(t, spool, "lone.yaml", waitTask("lone", "true", "a")+"status: {phase: Done}\n")
	if out, code := runCLI(t, "wait", "--spool", spool, "--all", "--for=phase=Done", "--timeout=0"); code != 0 || out != "task/lone condition met\n" {
		t.Fatalf("wait --all on a Done status: exit %d %q", code, out)
	}
}
