package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/lardon3d/lardon3d-controller/bench/internal/report"
)

// gobench reads `go test -bench` output from --in and appends one micro
// record per --want name, "n/a" when it is missing.
func gobench(args []string) error {
	fs := flag.NewFlagSet("gobench", flag.ContinueOnError)
	in := fs.String("in", "", "go test output")
	results := fs.String("results", "", "results file")
	var wants multi
	fs.Var(&wants, "want", "benchmark name (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Open(*in)
	if err != nil {
		return fmt.Errorf("gobench: %w", err)
	}
	defer f.Close()
	parsed := report.ParseGoBench(f)
	for _, w := range wants {
		// A wanted name matches itself and its sub-benchmarks (w/...).
		var found []report.GoBench
		for _, b := range parsed {
			if b.Name == w || strings.HasPrefix(b.Name, w+"/") {
				found = append(found, b)
			}
		}
		if len(found) == 0 {
			fmt.Printf("  %-45s n/a\n", w)
			if err := report.Append(*results, report.Record{Case: report.CaseMicro, Subject: w, F: map[string]float64{}, Note: "benchmark not found"}); err != nil {
				return err
			}
			continue
		}
		for _, b := range found {
			rec := report.Record{Case: report.CaseMicro, Subject: b.Name, F: map[string]float64{"ns_per_op": b.NsPerOp, "n": float64(b.N)}}
			if a, ok := b.Extra["allocs/op"]; ok {
				rec.F["allocs_per_op"] = a
			}
			if a, ok := b.Extra["B/op"]; ok {
				rec.F["bytes_per_op"] = a
			}
			fmt.Printf("  %-45s %.0f ns/op\n", b.Name, b.NsPerOp)
			if err := report.Append(*results, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// recordCmd appends a record from key=value arguments (numbers) after the
// flags, for figures run.sh computes itself.
func recordCmd(args []string) error {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	results := fs.String("results", "", "results file")
	cs := fs.String("case", "", "case")
	subject := fs.String("subject", "", "subject")
	kind := fs.String("kind", "", "kind")
	note := fs.String("note", "", "note")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rec := report.Record{Case: *cs, Subject: *subject, Kind: *kind, Note: *note, F: map[string]float64{}}
	for _, kv := range fs.Args() {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("record: %q is not key=value: %w", kv, errUsage)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("record: %s: %w", k, err)
		}
		rec.F[k] = x
	}
	return report.Append(*results, rec)
}

func reportCmd(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	results := fs.String("results", "", "results file")
	out := fs.String("out", "", "markdown file to write")
	scale := fs.Float64("scale", 1, "run scale")
	memScale := fs.Float64("mem-scale", 1, "memory scale")
	envelope := fs.String("envelope", "", "description of the envelope")
	var notes multi
	fs.Var(&notes, "note", "note under the table (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Open(*results)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	recs, err := report.Read(f)
	_ = f.Close()
	if err != nil {
		return err
	}
	uname, _ := exec.Command("uname", "-a").Output()
	m := report.Meta{
		Date: time.Now().UTC().Format(time.RFC3339), Uname: strings.TrimSpace(string(uname)),
		Nproc: runtime.NumCPU(), MemTotal: memTotal(), Scale: *scale, MemScale: *memScale,
		Cgroup: *envelope, Notes: notes,
	}
	md := report.Markdown(report.Build(recs), m)
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	return nil
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}
