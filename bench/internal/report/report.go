package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Case names.
const (
	CaseMicro      = "micro"
	CaseReaction   = "reaction"
	CaseThroughput = "throughput"
	CaseIdle       = "idle"
	CaseFlood      = "flood"
	CaseCrash      = "crash"
	CasePackingA   = "packing-A"
	CasePackingB   = "packing-B"
	CasePackingC   = "packing-C"
	CasePackingD   = "packing-D"
	CasePackingE   = "packing-E"
)

// Subjects with a special meaning.
const (
	// SubjectController is the controller's own run in a case.
	SubjectController = "lardon3d-controller"
	// SubjectWorkload carries a packing workload's totals (lower bound inputs).
	SubjectWorkload = "workload"
	// SubjectControllerExact is the controller on the same workload
	// declared at its real costs: the reference of packing D and E.
	SubjectControllerExact = "lardon3d-controller, declared exactly"
)

// Record is one line of the results file.
type Record struct {
	// Case is one of the Case constants.
	Case string `json:"case"`
	// Subject is what was measured: the controller, a peer, a benchmark.
	Subject string `json:"subject"`
	// Kind groups peers: "split" for hand-split peers, "whole", "naive".
	Kind string `json:"kind,omitempty"`
	// F holds the figures, by name.
	F map[string]float64 `json:"f"`
	// Note is free text (an error, "n/a", a caveat).
	Note string `json:"note,omitempty"`
}

// Append writes r as one JSON line at the end of path.
func Append(path string, r Record) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("append result: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("append result: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return fmt.Errorf("append result: %w", err)
	}
	return f.Close()
}

// Read parses a results file; unparseable lines are an error naming the line.
func Read(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rec Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return nil, fmt.Errorf("results line %d: %w", n, err)
		}
		out = append(out, rec)
	}
	return out, sc.Err()
}

// GoBench is one line of `go test -bench` output.
type GoBench struct {
	// Name without the -GOMAXPROCS suffix.
	Name string
	// N is the iteration count.
	N int64
	// NsPerOp is the time per operation.
	NsPerOp float64
	// Extra holds the other unit/value pairs (B/op, allocs/op, custom).
	Extra map[string]float64
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+([0-9.e+]+) ns/op(.*)$`)

// ParseGoBench extracts the benchmark lines of `go test -bench` output.
func ParseGoBench(r io.Reader) []GoBench {
	var out []GoBench
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		b := GoBench{Name: m[1], Extra: map[string]float64{}}
		b.N, _ = strconv.ParseInt(m[2], 10, 64)
		b.NsPerOp, _ = strconv.ParseFloat(m[3], 64)
		f := strings.Fields(m[4])
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				b.Extra[f[i+1]] = v
			}
		}
		out = append(out, b)
	}
	return out
}

// ErrNoSamples reports a percentile of nothing.
var ErrNoSamples = errors.New("no samples")

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of xs.
func Percentile(xs []float64, p float64) (float64, error) {
	if len(xs) == 0 {
		return 0, ErrNoSamples
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	k := int(math.Ceil(p / 100 * float64(len(s))))
	if k < 1 {
		k = 1
	}
	if k > len(s) {
		k = len(s)
	}
	return s[k-1], nil
}
