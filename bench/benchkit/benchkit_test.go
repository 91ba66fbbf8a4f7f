package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/bench/internal/report"
	"github.com/lardon3d/lardon3d-controller/bench/internal/workload"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func TestCountDoneLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "done.log")
	// a-p1 succeeded twice (a retry after a kill that still logged ok): counted once.
	text := "ok a-p0 32\nfail a-p1 137\nok a-p1 32\nok a-p1 32\nok b-p0 7\ngarbage\nfail b-p1 1\n"
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	done, fails, err := countDoneLog(p)
	if err != nil || done != 71 || fails != 2 {
		t.Fatalf("done %d fails %d err %v", done, fails, err)
	}
	done, fails, err = countDoneLog(filepath.Join(t.TempDir(), "missing"))
	if err != nil || done != 0 || fails != 0 {
		t.Fatalf("a missing log is nothing done: %d %d %v", done, fails, err)
	}
}

func TestCountSpool(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	done := workload.DoneManifest("d", "h", time.Unix(0, 0))
	write("d1.yaml", done)
	write("d2.yml", done)
	write(".d3.yaml.tmp", done)              // a dotfile: ignored
	write("notes.txt", done)                 // not a manifest
	write("bad.yaml", "::: not yaml")        // unparseable: ignored
	write("f.yaml", done[:len(done)-1]+"\n") // same, still Done
	write("r.yaml", workload.TrivialManifest("r", "x")+"status: {phase: Rejected}\n")
	n, failed, err := countSpool(dir)
	if err != nil || n != 3 || failed != 1 {
		t.Fatalf("items %d failed %d err %v", n, failed, err)
	}
}

func TestSpoolGenDoneCarriesTheControllersSpecHash(t *testing.T) {
	dir := t.TempDir()
	if err := spoolGen([]string{"--kind", "done", "--n", "3", "--dir", dir, "--prefix", "d"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "d-00002.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	task, err := v1alpha1.ParseManifest("d-00002.yaml", b)
	if task == nil {
		t.Fatalf("parse: %v", err)
	}
	if task.Status.Phase != v1alpha1.PhaseDone || task.Status.SpecHash != v1alpha1.SpecHash(task.Spec) || task.Status.SpecHash == "" {
		t.Fatalf("status %+v, hash of spec %s", task.Status, v1alpha1.SpecHash(task.Spec))
	}
}

func TestGobenchMatchesSubBenchmarks(t *testing.T) {
	dir := t.TempDir()
	in, res := filepath.Join(dir, "out.txt"), filepath.Join(dir, "r.jsonl")
	text := "BenchmarkWriteStatus/ReplaceStatus-2  61  2027071 ns/op  1.28 MB/s  259478 B/op  3449 allocs/op\n" +
		"BenchmarkWriteStatus/File-2  18  7012368 ns/op\nBenchmarkWriteStatusOther-2  1  1 ns/op\n"
	if err := os.WriteFile(in, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := gobench([]string{"--in", in, "--results", res, "--want", "BenchmarkWriteStatus", "--want", "BenchmarkMissing"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(res)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := report.Read(f)
	if err != nil || len(recs) != 3 {
		t.Fatalf("%v %+v", err, recs)
	}
	if recs[0].Subject != "BenchmarkWriteStatus/ReplaceStatus" || recs[0].F["allocs_per_op"] != 3449 || recs[1].Subject != "BenchmarkWriteStatus/File" {
		t.Fatalf("sub-benchmarks %+v", recs[:2])
	}
	if recs[2].Subject != "BenchmarkMissing" || recs[2].Note == "" {
		t.Fatalf("missing one %+v", recs[2])
	}
}
