package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// batches against a real controller: a task of two batches, one whose
// batch exits 3 and one whose batch outruns its batchTimeout. While the
// controller runs (it holds the store) the rows come from what it
// publishes; once it stopped, from the store itself: the same rows. The
// table shows the reasons, -o tsv its header and machine units, -o json
// the fields, and a name, --profile and --since filter.
func TestBatchesAccountingEndToEnd(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "ok.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: ok}
spec:
  command: [sh, -c, 'sleep 0.2']
  items: {count: 4}
  resources:
    profile: acct-ok
    fixed: {memory: 64Mi}
    batch: {min: 2, max: 2}
`)
	writeManifest(t, spool, "bad.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: bad}
spec:
  command: [sh, -c, 'exit 3']
  items: {count: 1}
  resources: {profile: acct-bad, fixed: {memory: 64Mi}}
`)
	writeManifest(t, spool, "slow.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: slow}
spec:
  command: [sleep, "30"]
  items: {count: 1}
  batchTimeout: 1s
  resources: {profile: acct-slow, fixed: {memory: 64Mi}}
`)
	c := startController(t, spool)
	jsonRows := func() []reconcile.BatchRow {
		out, code := runCLI(t, "batches", "--spool", spool, "-o", "json")
		if code != 0 {
			t.Fatalf("batches -o json: exit %d: %s", code, out)
		}
		var rows []reconcile.BatchRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("batches -o json: %v\n%s", err, out)
		}
		return rows
	}
	var rows []reconcile.BatchRow
	eventually(t, time.Minute, "four batches published", func() bool {
		rows = jsonRows()
		return len(rows) == 4
	})
	byTask := map[string][]reconcile.BatchRow{}
	for _, r := range rows {
		byTask[r.Task] = append(byTask[r.Task], r)
	}
	if ok := byTask["ok"]; len(ok) != 2 || ok[0].Batch != 0 || ok[1].Batch != 1 || ok[0].Items != 2 || ok[0].ExitCode != 0 ||
		ok[0].Generation != 1 || ok[0].Attempt != 1 || ok[0].ReservedBytes != 64<<20 || ok[0].Elapsed() < 150*time.Millisecond {
		t.Errorf("ok's rows: %+v", ok)
	}
	if bad := byTask["bad"]; len(bad) != 1 || bad[0].ExitCode != 3 {
		t.Errorf("bad's rows: %+v", bad)
	}
	if slow := byTask["slow"]; len(slow) != 1 || slow[0].Reason != "BatchTimeout" || slow[0].Profile != "acct-slow" {
		t.Errorf("slow's rows: %+v", slow)
	}
	table, code := runCLI(t, "batches", "--spool", spool)
	if code != 0 || !strings.HasPrefix(table, "TASK ") || !strings.Contains(table, "EFFICIENCY") {
		t.Fatalf("batches: exit %d:\n%s", code, table)
	}
	for _, want := range []string{"BatchTimeout", "64.0MiB"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "bad" && f[5] != "3" {
			t.Errorf("bad's EXIT cell %q in %q, want 3", f[5], line)
		}
	}

	// Stopped: the rows come from the store, the same ones.
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	c.wait(t, time.Minute)
	if again := jsonRows(); len(again) != len(rows) {
		t.Errorf("from the store: %d rows, published %d", len(again), len(rows))
	}
	tsv, code := runCLI(t, "batches", "--spool", spool, "-o", "tsv", "ok", "bad")
	lines := strings.Split(strings.TrimSpace(tsv), "\n")
	if code != 0 || len(lines) != 4 {
		t.Fatalf("batches -o tsv ok bad: exit %d, want a header and 3 lines:\n%s", code, tsv)
	}
	header := strings.Split(lines[0], "\t")
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if len(f) != len(header) {
			t.Fatalf("%q: %d fields, header %d", l, len(f), len(header))
		}
		if f[col["RESERVED"]] != "67108864" || !strings.Contains(f[col["START"]], ".") || f[col["TASK"]] == "slow" {
			t.Errorf("tsv line %q", l)
		}
	}
	if out, _ := runCLI(t, "batches", "--spool", spool, "-o", "tsv", "--profile", "acct-slow"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "\tBatchTimeout\t") {
		t.Errorf("--profile acct-slow:\n%s", out)
	}
	if out, _ := runCLI(t, "batches", "--spool", spool, "--since", "1ns"); !strings.Contains(out, "no batch recorded") {
		t.Errorf("--since 1ns:\n%s", out)
	}

	// A history elsewhere (a controller run with --history): batches and
	// estimates read it where --history names it, not the machine's.
	machine := filepath.Join(filepath.Dir(spool), "machine-state", "lardon3d", history.FileName)
	moved := filepath.Join(t.TempDir(), "elsewhere.db")
	if err := os.Rename(machine, moved); err != nil {
		t.Fatal(err)
	}
	if out, _ := runCLI(t, "batches", "--spool", spool); !strings.Contains(out, "no batch recorded") {
		t.Errorf("batches, the machine's history moved away:\n%s", out)
	}
	if out, code := runCLI(t, "batches", "--spool", spool, "--history", moved, "-o", "tsv"); code != 0 || strings.Count(out, "\n") != 5 {
		t.Errorf("batches --history %s: exit %d, want a header and 4 rows:\n%s", moved, code, out)
	}
	if out, code := runCLI(t, "estimates", "--spool", spool, "--history", moved); code != 0 || !strings.Contains(out, "acct-ok") {
		t.Errorf("estimates --history %s: exit %d, want profile acct-ok:\n%s", moved, code, out)
	}
	if out, _ := runCLI(t, "estimates", "--spool", spool); strings.Contains(out, "acct-ok") {
		t.Errorf("estimates, the machine's history moved away, still lists acct-ok:\n%s", out)
	}
	// A mistyped --history is an error, not an empty history.
	for _, verb := range []string{"batches", "estimates"} {
		if out, code := runCLI(t, verb, "--spool", spool, "--history", moved+".typo"); code != exitUsage || !strings.Contains(out, "--history") {
			t.Errorf("%s --history MISSING: exit %d, want %d and a message:\n%s", verb, code, exitUsage, out)
		}
	}
}
