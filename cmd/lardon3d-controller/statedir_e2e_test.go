package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestVerbsFindAControllerStartedWithStateDir: a controller started with
// `run --state-dir X`, X outside the spool, serves get's listings on X's
// socket and publishes its views there; get, describe and budgets given
// --state-dir X find it, and so do they without the flag (the machine's
// registry names X); given another state directory they do not.
func TestVerbsFindAControllerStartedWithStateDir(t *testing.T) {
	spool := newSpool(t)
	stateDir := filepath.Join(filepath.Dir(spool), "state-x")
	other := filepath.Join(filepath.Dir(spool), "state-other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, spool, "a.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: a}
spec:
  command: [lardon3d-synth, --fixed, 16Mi, --per-item, 4Mi, --hold, 100ms]
  items: {count: 2}
`)
	c := startController(t, spool, "--state-dir", stateDir, "--metrics-addr", "127.0.0.1:0")
	eventually(t, time.Minute, "a Done", func() bool { return phaseOf(t, filepath.Join(spool, "a.yaml")) == "Done" })
	addr := metricsAddr(t, c)
	if _, err := os.Stat(filepath.Join(stateDir, "get.sock")); err != nil {
		t.Fatalf("the listing socket in --state-dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(spool, stateDirName)); !os.IsNotExist(err) {
		t.Fatalf("SPOOL/%s made beside --state-dir: %v", stateDirName, err)
	}
	row := regexp.MustCompile(`(?m)^a\s+Done\s`)
	for _, args := range [][]string{{"--state-dir", stateDir}, nil, {"--state-dir", other}} {
		served := listingsServed(t, addr, "served")
		cli := append([]string{"get", "--spool", spool}, args...)
		out, code := runCLI(t, cli...)
		if code != 0 || !row.MatchString(out) {
			t.Errorf("%v (exit %d):\n%s", cli, code, out)
		}
		wantServed := served + 1
		if len(args) == 2 && args[1] == other {
			wantServed = served // another state directory: no controller there
		}
		if got := listingsServed(t, addr, "served"); got != wantServed {
			t.Errorf("%v: %d listings served, want %d", cli, got, wantServed)
		}
	}
	// describe reads the estimates the controller publishes in X.
	measured := regexp.MustCompile(`(?m)^Measured:\s+(.*)$`)
	describeMeasured := func(args ...string) string {
		cli := append([]string{"describe", "a", "--spool", spool}, args...)
		out, code := runCLI(t, cli...)
		m := measured.FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("%v (exit %d):\n%s", cli, code, out)
		}
		return m[1]
	}
	eventually(t, 30*time.Second, "describe --state-dir X reading the published estimates", func() bool {
		return !strings.Contains(describeMeasured("--state-dir", stateDir), "nothing yet")
	})
	if m := describeMeasured(); strings.Contains(m, "nothing yet") {
		t.Errorf("describe without --state-dir: Measured: %s", m)
	}
	if m := describeMeasured("--state-dir", other); !strings.Contains(m, "nothing yet") {
		t.Errorf("describe --state-dir %s (no controller's): Measured: %s", other, m)
	}
	// budgets reads the live view published there.
	for _, args := range [][]string{{"--state-dir", stateDir}, nil} {
		cli := append([]string{"budgets", "--spool", spool}, args...)
		if out, code := runCLI(t, cli...); code != 0 || !strings.Contains(out, "live, from the controller") {
			t.Errorf("%v (exit %d):\n%s", cli, code, out)
		}
	}
	if out, _ := runCLI(t, "budgets", "--spool", spool, "--state-dir", other); strings.Contains(out, "live, from the controller") {
		t.Errorf("budgets --state-dir %s read a live view:\n%s", other, out)
	}
}
