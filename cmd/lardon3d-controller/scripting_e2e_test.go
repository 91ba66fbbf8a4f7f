package main

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExitWhenDoneSettlesPausedTasksAndTheirDependents(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "done.yaml", strings.ReplaceAll(validManifest, "%NAME%", "done"))
	writeManifest(t, spool, "held.yaml", strings.ReplaceAll(validManifest, "%NAME%", "held")+"  paused: true\n")
	writeManifest(t, spool, "after.yaml", strings.ReplaceAll(validManifest, "%NAME%", "after")+"  dependsOn: [held, done]\n")
	writeManifest(t, spool, "typo.yaml", strings.ReplaceAll(validManifest, "%NAME%", "typo")+"  dependsOn: [dne]\n")
	c := startController(t, spool, "--exit-when-done", "--log-level", "warn")
	if code := c.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d, want 1 (settled, not all Done)", code)
	}
	table := c.stderr.String()
	for _, row := range []string{`(?m)^after\s+Pending\s.*WaitingForDependencies`, `(?m)^done\s+Done\s`, `(?m)^held\s+Pending\s.*Paused`, `(?m)^typo\s+Pending\s.*DependencyMissing`} {
		if !regexp.MustCompile(row).MatchString(table) {
			t.Errorf("final table lacks %s:\n%s", row, table)
		}
	}
}

func TestWaitForTasksWaitsForTheFirstManifest(t *testing.T) {
	// Without it, an empty spool is settled at once.
	c := startController(t, newSpool(t), "--exit-when-done")
	if code := c.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("empty spool without --wait-for-tasks: exit %d", code)
	}
	spool := newSpool(t)
	c = startController(t, spool, "--exit-when-done", "--wait-for-tasks", "2")
	eventually(t, 20*time.Second, "the spool listed", func() bool { return strings.Contains(c.stderr.String(), "spool listed") })
	writeManifest(t, spool, "one.yaml", strings.ReplaceAll(validManifest, "%NAME%", "one"))
	eventually(t, 20*time.Second, "one Done", func() bool { return phaseOf(t, spool+"/one.yaml") == "Done" })
	select {
	case <-c.done:
		t.Fatalf("exited with one task of the two waited for (exit %d)", c.code)
	case <-time.After(500 * time.Millisecond):
	}
	writeManifest(t, spool, "two.yaml", strings.ReplaceAll(validManifest, "%NAME%", "two"))
	if code := c.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d, want 0", code)
	}
	if phaseOf(t, spool+"/two.yaml") != "Done" {
		t.Fatalf("two: %s", phaseOf(t, spool+"/two.yaml"))
	}
	if out, code := runCLI(t, "run", "--spool", spool, "--wait-for-tasks", "-1"); code != 2 || !strings.Contains(out, "--wait-for-tasks") {
		t.Fatalf("--wait-for-tasks -1: exit %d %s", code, out)
	}
}

func TestInterruptedRunExitsWithTheSignalsCode(t *testing.T) {
	for sig, want := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
		spool := newSpool(t)
		path := writeManifest(t, spool, "long.yaml", strings.ReplaceAll(validManifest, "%NAME%", "long")+"  \n")
		writeManifest(t, spool, "long.yaml", strings.Replace(readFileString(t, path), `command: ["true"]`, `command: [sleep, "60"]`, 1))
		c := startController(t, spool, "--exit-when-done")
		waitRunning(t, path)
		_ = c.cmd.Process.Signal(sig)
		if code := c.wait(t, 30*time.Second); code != want {
			t.Errorf("%s: exit %d, want %d", sig, code, want)
		}
		name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]
		if !strings.Contains(c.stderr.String(), "stopped by "+name+" before every task settled") {
			t.Errorf("%s: no explanation in\n%s", sig, tail(c.stderr.String(), 2000))
		}
		if phaseOf(t, path) != "Pending" {
			t.Errorf("%s: phase %s after the stop, want Pending (resumed by the next run)", sig, phaseOf(t, path))
		}
	}
	// Without --exit-when-done a signal is the way to stop: exit 0.
	spool := newSpool(t)
	c := startController(t, spool)
	eventually(t, 20*time.Second, "the spool listed", func() bool { return strings.Contains(c.stderr.String(), "spool listed") })
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code := c.wait(t, 30*time.Second); code != 0 {
		t.Errorf("run stopped by SIGTERM: exit %d, want 0", code)
	}
}

func readFileString(t *testing.T, path string) string {
	t.Helper()
	return string(mustRead(t, path))
}
