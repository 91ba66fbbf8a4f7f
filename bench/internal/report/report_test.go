package report

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const benchOut = `goos: linux
goarch: amd64
pkg: github.com/lardon3d/lardon3d-controller/pkg/governor
cpu: Intel(R) Xeon(R)
BenchmarkDecide/reservations=10000-2         	  912345	      1234 ns/op	      64 B/op	       2 allocs/op
BenchmarkScan/pending=10000-2   	     500	   2400000 ns/op
PASS
ok  	github.com/lardon3d/lardon3d-controller/pkg/governor	3.1s
`

func TestParseGoBench(t *testing.T) {
	got := ParseGoBench(strings.NewReader(benchOut))
	if len(got) != 2 {
		t.Fatalf("got %d lines: %+v", len(got), got)
	}
	if got[0].Name != "BenchmarkDecide/reservations=10000" || got[0].N != 912345 || got[0].NsPerOp != 1234 || got[0].Extra["allocs/op"] != 2 {
		t.Fatalf("first %+v", got[0])
	}
	if got[1].Name != "BenchmarkScan/pending=10000" || got[1].NsPerOp != 2.4e6 {
		t.Fatalf("second %+v", got[1])
	}
}

func TestPercentile(t *testing.T) {
	xs := make([]float64, 200)
	for i := range xs {
		xs[i] = float64(200 - i) // 200..1, unsorted on purpose
	}
	if p, _ := Percentile(xs, 50); p != 100 {
		t.Fatalf("p50 %v", p)
	}
	if p, _ := Percentile(xs, 99); p != 198 {
		t.Fatalf("p99 %v", p)
	}
	if xs[0] != 200 {
		t.Fatal("input was sorted in place")
	}
	if _, err := Percentile(nil, 50); !errors.Is(err, ErrNoSamples) {
		t.Fatalf("err %v", err)
	}
}

func TestAppendRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.jsonl")
	for i := 0; i < 3; i++ {
		if err := Append(p, Record{Case: CaseIdle, Subject: "x", F: map[string]float64{"i": float64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	f, _ := os.Open(p)
	defer f.Close()
	recs, err := Read(f)
	if err != nil || len(recs) != 3 || recs[2].F["i"] != 2 {
		t.Fatalf("%v %+v", err, recs)
	}
	if _, err := Read(strings.NewReader("{}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("want line 2 error, got %v", err)
	}
}

func packing(c string, ctlMakespan, ctlOOM float64) []Record {
	const gib = 1 << 30
	full := func(subject, kind string, ms, cpu float64) Record {
		return Record{Case: c, Subject: subject, Kind: kind, F: map[string]float64{
			"makespan_s": ms, "items_done": 1280, "items_total": 1280, "cpu_s": cpu, "peak_rss": 7 * gib, "cpu_util": 0.9}}
	}
	ctl := full(SubjectController, "", ctlMakespan, 300)
	ctl.F["oom_kills"] = ctlOOM
	return []Record{
		{Case: c, Subject: SubjectWorkload, F: map[string]float64{"cpu_nominal_s": 256, "mem_byte_s": 100 * gib, "cores": 2, "budget": 8 * gib}},
		ctl,
		full("tsp -S 2, split 2", "split", 154, 302),
		full("tsp -S 1, whole", "whole", 299, 301),
		{Case: c, Subject: "xargs -P 2", Kind: "naive", F: map[string]float64{"makespan_s": 20, "items_done": 64, "items_total": 1280, "oom_kills": 19, "cpu_s": 30}},
	}
}

func TestPackingVerdicts(t *testing.T) {
	lb, ok := Bound(packing(CasePackingA, 160, 0))
	// The least CPU of complete runs (300 s) beats the nominal 256 s; the
	// incomplete xargs run (30 s) must not lower it.
	if !ok || lb.CPUSeconds != 300 || lb.Seconds != 150 {
		t.Fatalf("bound %+v", lb)
	}
	rows := Build(packing(CasePackingA, 160, 0))
	ctl := find(t, rows, SubjectController)
	if !strings.HasPrefix(ctl.Verdict, Missed) || !strings.Contains(ctl.Verdict, "slower than tsp -S 2, split 2") {
		t.Fatalf("160 s is behind the split peer's 154 s: %q", ctl.Verdict)
	}
	rows = Build(packing(CasePackingA, 152, 0))
	if v := find(t, rows, SubjectController).Verdict; v != Met {
		t.Fatalf("152 s is within 1.10x of 150 s and ahead of 154 s: %q", v)
	}
	// The CPU its jobs burned counts too: 152 s but 310 CPU-s against the
	// split's 302 misses.
	recs := packing(CasePackingC, 152, 0)
	recs[1].F["cpu_s"] = 310
	if v := find(t, Build(recs), SubjectController).Verdict; !strings.HasPrefix(v, Missed) || !strings.Contains(v, "8.0 CPU-s more than tsp -S 2, split 2 (1.03×)") {
		t.Fatalf("310 CPU-s against the split's 302: %q", v)
	}
	rows = Build(packing(CasePackingA, 152, 1))
	if v := find(t, rows, SubjectController).Verdict; !strings.Contains(v, "1 OOM kills") {
		t.Fatalf("an OOM kill must miss: %q", v)
	}
	rows = Build(packing(CasePackingB, 200, 0))
	if v := find(t, rows, SubjectController).Verdict; !strings.Contains(v, "not ahead of tsp -S 2, split 2") || strings.Contains(v, "xargs") {
		t.Fatalf("B verdict %q", v)
	}
	md := Markdown(rows, Meta{Date: "d", Uname: "u", Nproc: 2, MemTotal: 8 << 30, Scale: 1, MemScale: 1})
	if !strings.Contains(md, "| packing-B | xargs -P 2 | makespan — (gave up") {
		t.Fatalf("markdown:\n%s", md)
	}
}

func TestReactionThroughputIdleVerdicts(t *testing.T) {
	rows := Build([]Record{
		{Case: CaseReaction, Subject: SubjectController, F: map[string]float64{"n": 200, "p50_running_ms": 8, "p99_running_ms": 120}},
		{Case: CaseThroughput, Subject: SubjectController, F: map[string]float64{"n": 2000, "wall_s": 1.0}},
		{Case: CaseThroughput, Subject: "tsp -S 2", F: map[string]float64{"n": 2000, "wall_s": 2.0}},
		{Case: CaseIdle, Subject: SubjectController, F: map[string]float64{"seconds": 60, "cpu_pct": 0.2, "rss_mb": 151}},
		{Case: CaseMicro, Subject: "BenchmarkWriteStatus", Note: "benchmark not found"},
	})
	want := map[string]string{
		"lardon3d-controller, to Running":      "missed: p99 120.0 ms is 20.0 ms over",
		SubjectController:                      Met,
		"lardon3d-controller, resident memory": "missed: 151 MB is 1 MB over",
	}
	for subj, v := range want {
		if got := find(t, rows, subj).Verdict; got != v {
			t.Errorf("%s: got %q want %q", subj, got, v)
		}
	}
	if f := find(t, rows, "BenchmarkWriteStatus").Figure; !strings.HasPrefix(f, "n/a") {
		t.Errorf("missing benchmark figure %q", f)
	}
}

func find(t *testing.T, rows []Row, subject string) Row {
	t.Helper()
	for _, r := range rows {
		if r.Subject == subject || strings.HasPrefix(r.Subject, subject+" (") {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", subject, rows)
	return Row{}
}

func TestPackingDEVerdicts(t *testing.T) {
	for _, c := range []string{CasePackingD, CasePackingE} {
		mk := func(ms, ref float64) []Record {
			recs := packing(c, ms, 0)
			recs = append(recs, Record{Case: c, Subject: SubjectControllerExact, F: map[string]float64{
				"makespan_s": ref, "items_done": 1280, "items_total": 1280, "cpu_s": 300}})
			return recs
		}
		if v := find(t, Build(mk(110, 100)), SubjectController).Verdict; v != Met {
			t.Errorf("%s: 1.10× the exact declaration: %q", c, v)
		}
		if v := find(t, Build(mk(112, 100)), SubjectController).Verdict; !strings.Contains(v, "1.12× the exact declaration") {
			t.Errorf("%s: 1.12× must miss (issue 35: within 1.10×): %q", c, v)
		}
		if v := find(t, Build(packing(c, 110, 0)), SubjectController).Verdict; !strings.Contains(v, "no complete run declared exactly") {
			t.Errorf("%s without a reference: %q", c, v)
		}
	}
}

func TestFloodVerdicts(t *testing.T) {
	rows := Build([]Record{{Case: CaseFlood, Subject: SubjectController, F: map[string]float64{
		"n": 10000, "wall_s": 80, "rss_peak_mb": 126, "get_n": 100, "get_p50_ms": 150, "get_max_ms": 210,
		"floor_n": 100, "floor_p50_ms": 70, "floor_max_ms": 160,
	}}})
	mem := find(t, rows, SubjectController+", 10000 tasks dropped at once, resident memory")
	if mem.Verdict != Met {
		t.Errorf("126 MB: %q", mem.Verdict)
	}
	get := find(t, rows, SubjectController+", `get` during the run")
	if get.Verdict != "missed: slowest get 210 ms" {
		t.Errorf("get max 210 ms: %q", get.Verdict)
	}
	if want := "p50 150 ms, max 210 ms (n=100); the binary doing nothing (`--version`) beside it: p50 70 ms, max 160 ms"; get.Figure != want {
		t.Errorf("get figure %q, want %q", get.Figure, want)
	}
	// A record of a bench before the floor was sampled shows get alone.
	old := Build([]Record{{Case: CaseFlood, Subject: SubjectController, F: map[string]float64{"n": 10, "get_n": 3, "get_p50_ms": 90, "get_max_ms": 120}}})
	if g := find(t, old, SubjectController+", `get` during the run"); g.Figure != "p50 90 ms, max 120 ms (n=3)" || g.Verdict != Met {
		t.Errorf("without a floor: %+v", g)
	}
}
