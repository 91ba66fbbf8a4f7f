package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGetWatchPrintsOnlyChangedRows: the table once, then one row per
// change, as kubectl get -w does; nothing when a file is rewritten as is.
func TestGetWatchPrintsOnlyChangedRows(t *testing.T) {
	spool := newSpool(t)
	a := writeManifest(t, spool, "alpha.yaml", strings.ReplaceAll(validManifest, "%NAME%", "alpha"))
	out, _ := startCLI(t, "get", "-w", "--spool", spool)
	// What get says on stderr of the spool nobody serves is not a row.
	rows := func() string {
		var keep []string
		for _, l := range strings.SplitAfter(out.String(), "\n") {
			if !strings.HasPrefix(l, "no controller is running on ") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "")
	}
	eventually(t, 10*time.Second, "the first table", func() bool { return strings.Count(rows(), "\n") == 2 })
	if !regexp.MustCompile(`^NAME\s+PHASE.*\nalpha\s+New\s`).MatchString(rows()) {
		t.Fatalf("first table:\n%s", rows())
	}
	// Rewritten unchanged: nothing printed (the 2 s tick included).
	if err := os.WriteFile(a, mustRead(t, a), 0o600); err != nil {
		t.Fatal(err)
	}
	b := writeManifest(t, spool, "beta.yaml", strings.ReplaceAll(validManifest, "%NAME%", "beta"))
	eventually(t, 10*time.Second, "beta's row", func() bool { return strings.Count(rows(), "\n") >= 3 })
	time.Sleep(2500 * time.Millisecond)
	lines := strings.Split(strings.TrimSuffix(rows(), "\n"), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^beta\s+New\s`).MatchString(lines[2]) {
		t.Fatalf("after adding beta, want one more row:\n%s", rows())
	}
	// A changed status: that row alone.
	writeManifest(t, spool, "alpha.yaml", strings.ReplaceAll(validManifest, "%NAME%", "alpha")+"status:\n  phase: Failed\n")
	eventually(t, 10*time.Second, "alpha's new row", func() bool { return strings.Count(rows(), "\n") >= 4 })
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "beta deleted", func() bool { return strings.Count(rows(), "\n") >= 5 })
	lines = strings.Split(strings.TrimSuffix(rows(), "\n"), "\n")
	if len(lines) != 5 || !regexp.MustCompile(`^alpha\s+Failed\s`).MatchString(lines[3]) || !regexp.MustCompile(`^beta\s+Deleted\s`).MatchString(lines[4]) {
		t.Fatalf("rows after the changes:\n%s", rows())
	}
	// The rows line up with the header.
	if strings.Index(lines[0], "PHASE") != strings.Index(lines[4], "Deleted") {
		t.Errorf("columns do not line up:\n%s", rows())
	}
	// A file that stays unparseable is shown, once.
	writeManifest(t, spool, "broken.yaml", "kind: [\n")
	eventually(t, 10*time.Second, "broken's row", func() bool { return strings.Count(rows(), "\n") >= 6 })
	time.Sleep(2500 * time.Millisecond)
	lines = strings.Split(strings.TrimSuffix(rows(), "\n"), "\n")
	if len(lines) != 6 || !regexp.MustCompile(`^broken\s+Invalid\s.*not parseable YAML`).MatchString(lines[5]) {
		t.Fatalf("after a broken file:\n%s", rows())
	}
}
