package report

import (
	"fmt"
	"math"
	"strings"
)

// Meta describes the run and the machine.
type Meta struct {
	// Date of the run (RFC 3339).
	Date string
	// Uname is `uname -a`.
	Uname string
	// Nproc is the number of online CPUs.
	Nproc int
	// MemTotal is the machine's memory in bytes.
	MemTotal int64
	// Scale and MemScale are the run's --scale and --mem-scale.
	Scale, MemScale float64
	// Cgroup describes the envelope ("cgroup v1, memory limit 8 GiB").
	Cgroup string
	// Notes are printed under the table.
	Notes []string
}

// Row is one line of the table.
type Row struct {
	// Case is the case name.
	Case string
	// Subject is what was measured.
	Subject string
	// Figure is the measured value(s).
	Figure string
	// Target is the target, "—" when the row is informative.
	Target string
	// Verdict is "met", "missed: why", or "—".
	Verdict string
}

const none = "—"

// Verdicts.
const (
	Met    = "met"
	Missed = "missed"
)

func verdict(problems []string) string {
	if len(problems) == 0 {
		return Met
	}
	return Missed + ": " + strings.Join(problems, "; ")
}

// Build turns records into rows, in case order.
func Build(recs []Record) []Row {
	by := map[string][]Record{}
	for _, r := range recs {
		by[r.Case] = append(by[r.Case], r)
	}
	var rows []Row
	rows = append(rows, microRows(by[CaseMicro])...)
	rows = append(rows, reactionRows(by[CaseReaction])...)
	rows = append(rows, throughputRows(by[CaseThroughput])...)
	rows = append(rows, idleRows(by[CaseIdle])...)
	rows = append(rows, floodRows(by[CaseFlood])...)
	rows = append(rows, crashRows(by[CaseCrash])...)
	rows = append(rows, packingRows(CasePackingA, by[CasePackingA])...)
	rows = append(rows, packingRows(CasePackingB, by[CasePackingB])...)
	rows = append(rows, packingRows(CasePackingC, by[CasePackingC])...)
	rows = append(rows, packingRows(CasePackingD, by[CasePackingD])...)
	rows = append(rows, packingRows(CasePackingE, by[CasePackingE])...)
	return rows
}

func microRows(recs []Record) []Row {
	var rows []Row
	for _, r := range recs {
		fig := "n/a"
		if r.Note == "" {
			fig = fmtDuration(r.F["ns_per_op"]*1e-9) + "/op"
			if a, ok := r.F["allocs_per_op"]; ok {
				fig += fmt.Sprintf(", %.0f allocs/op", a)
			}
		} else {
			fig += " (" + r.Note + ")"
		}
		rows = append(rows, Row{CaseMicro, r.Subject, fig, none, none})
	}
	return rows
}

func reactionRows(recs []Record) []Row {
	var rows []Row
	for _, r := range recs {
		if r.Note != "" && r.F["n"] == 0 {
			rows = append(rows, Row{CaseReaction, r.Subject, "n/a (" + r.Note + ")", "p99 < 100 ms to Running", Missed + ": not measured"})
			continue
		}
		var probs []string
		if p := r.F["p99_running_ms"]; p >= 100 {
			probs = append(probs, fmt.Sprintf("p99 %.1f ms is %.1f ms over", p, p-100))
		}
		if m := r.F["missed"]; m > 0 {
			probs = append(probs, fmt.Sprintf("%.0f drops never reached Running", m))
		}
		rows = append(rows, Row{CaseReaction, r.Subject + ", to Running",
			fmt.Sprintf("p50 %.1f ms, p99 %.1f ms (n=%.0f)", r.F["p50_running_ms"], r.F["p99_running_ms"], r.F["n"]),
			"p99 < 100 ms", verdict(probs)})
		rows = append(rows, Row{CaseReaction, r.Subject + ", to Done",
			fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", r.F["p50_done_ms"], r.F["p99_done_ms"]), none, none})
	}
	return rows
}

func throughputRows(recs []Record) []Row {
	var ctl *Record
	peers := map[string]float64{}
	var rows []Row
	for i, r := range recs {
		if r.Subject == SubjectController {
			ctl = &recs[i]
			continue
		}
		if r.F["failed"] == 0 && r.Note == "" {
			peers[r.Subject] = r.F["wall_s"]
		}
		rows = append(rows, Row{CaseThroughput, r.Subject, tputFigure(r), none, none})
	}
	if ctl == nil {
		return rows
	}
	fig := tputFigure(*ctl)
	var probs []string
	ts, ok := peerWall(peers, "tsp ")
	if ok {
		ratio := ctl.F["wall_s"] / ts
		fig += fmt.Sprintf("; %.2f× tsp", ratio)
		if ratio > 1 {
			probs = append(probs, fmt.Sprintf("%.2f× the wall time of tsp (%.2f s over)", ratio, ctl.F["wall_s"]-ts))
		}
	} else {
		probs = append(probs, "no tsp figure to compare with")
	}
	if p, ok := peerWall(peers, "parallel "); ok {
		fig += fmt.Sprintf(", %.2f× parallel", ctl.F["wall_s"]/p)
	}
	if ctl.F["failed"] > 0 || ctl.Note != "" {
		probs = append(probs, fmt.Sprintf("%.0f tasks not Done %s", ctl.F["failed"], ctl.Note))
	}
	return append([]Row{{CaseThroughput, SubjectController, fig, "wall ≤ tsp's (ratio ≤ 1.00)", verdict(probs)}}, rows...)
}

// peerWall finds the wall time of the peer whose subject starts with prefix.
func peerWall(peers map[string]float64, prefix string) (float64, bool) {
	for s, w := range peers {
		if strings.HasPrefix(s, prefix) {
			return w, true
		}
	}
	return 0, false
}

func tputFigure(r Record) string {
	if r.Note != "" && r.F["wall_s"] == 0 {
		return "n/a (" + r.Note + ")"
	}
	s := fmt.Sprintf("%.0f tasks in %.2f s (%.0f/s)", r.F["n"], r.F["wall_s"], r.F["n"]/math.Max(r.F["wall_s"], 1e-9))
	if r.F["failed"] > 0 {
		s += fmt.Sprintf(", %.0f failed", r.F["failed"])
	}
	return s
}

func idleRows(recs []Record) []Row {
	var rows []Row
	for _, r := range recs {
		if r.Note != "" && r.F["seconds"] == 0 {
			rows = append(rows, Row{CaseIdle, r.Subject, "n/a (" + r.Note + ")", "CPU < 1% of a core, RSS < 150 MB", Missed + ": not measured"})
			continue
		}
		cpu, rss := r.F["cpu_pct"], r.F["rss_mb"]
		var p1, p2 []string
		if cpu >= 1 {
			p1 = append(p1, fmt.Sprintf("%.2f%% is %.2f points over", cpu, cpu-1))
		}
		if rss >= 150 {
			p2 = append(p2, fmt.Sprintf("%.0f MB is %.0f MB over", rss, rss-150))
		}
		rows = append(rows,
			Row{CaseIdle, fmt.Sprintf("%s, CPU over %.0f s, %.0f Done manifests", r.Subject, r.F["seconds"], r.F["files"]),
				fmt.Sprintf("%.3f%% of a core", cpu), "< 1% of a core", verdict(p1)},
			Row{CaseIdle, r.Subject + ", resident memory",
				fmt.Sprintf("%.1f MB (peak %.1f MB)", rss, r.F["hwm_mb"]), "< 150 MB", verdict(p2)})
	}
	return rows
}

// floodRows: many trivial tasks dropped into a running controller's spool
// at once; its resident memory and get's latency sampled throughout, with
// the latency of the same binary doing nothing, when sampled, beside it.
func floodRows(recs []Record) []Row {
	var rows []Row
	for _, r := range recs {
		if r.Note != "" && r.F["n"] == 0 {
			rows = append(rows, Row{CaseFlood, r.Subject, "n/a (" + r.Note + ")", "RSS < 150 MB, get < 200 ms", Missed + ": not measured"})
			continue
		}
		var p1, p2 []string
		if m := r.F["rss_peak_mb"]; m >= 150 {
			p1 = append(p1, fmt.Sprintf("%.0f MB is %.0f MB over", m, m-150))
		}
		if r.F["failed"] > 0 || r.Note != "" {
			p1 = append(p1, fmt.Sprintf("%.0f tasks not Done %s", r.F["failed"], r.Note))
		}
		if g := r.F["get_max_ms"]; g >= 200 || r.F["get_n"] == 0 {
			p2 = append(p2, fmt.Sprintf("slowest get %.0f ms", g))
		}
		get := fmt.Sprintf("p50 %.0f ms, max %.0f ms (n=%.0f)", r.F["get_p50_ms"], r.F["get_max_ms"], r.F["get_n"])
		if r.F["floor_n"] > 0 {
			get += fmt.Sprintf("; the binary doing nothing (`--version`) beside it: p50 %.0f ms, max %.0f ms", r.F["floor_p50_ms"], r.F["floor_max_ms"])
		}
		rows = append(rows,
			Row{CaseFlood, fmt.Sprintf("%s, %.0f tasks dropped at once, resident memory", r.Subject, r.F["n"]),
				fmt.Sprintf("peak %.1f MB; all Done in %.1f s", r.F["rss_peak_mb"], r.F["wall_s"]), "< 150 MB", verdict(p1)},
			Row{CaseFlood, r.Subject + ", `get` during the run", get, "< 200 ms throughout", verdict(p2)})
	}
	return rows
}

// crashRows: kill -9 at random moments during a run of trivial tasks.
func crashRows(recs []Record) []Row {
	var rows []Row
	for _, r := range recs {
		var probs []string
		if r.F["passed"] != 1 {
			probs = append(probs, "failed: "+r.Note)
		}
		rows = append(rows, Row{CaseCrash, fmt.Sprintf("%s, %.0f kill -9 during %.0f tasks", r.Subject, r.F["kills"], r.F["tasks"]),
			fmt.Sprintf("passed %.0f of 1 (%.1f s)", r.F["passed"], r.F["wall_s"]),
			"all Done, no file corrupt, no committed progress lost", verdict(probs)})
	}
	return rows
}

// LowerBound is the packing lower bound of one workload and its inputs.
type LowerBound struct {
	// Seconds is the bound.
	Seconds float64
	// CPUSeconds is the CPU work used (the larger of nominal and least measured).
	CPUSeconds float64
	// MemGiBSeconds is the least memory-time, in GiB·s.
	MemGiBSeconds float64
	// Cores and BudgetGiB are the machine's share.
	Cores     float64
	BudgetGiB float64
}

// Bound computes the lower bound of a packing case from its workload record
// and the CPU measured by complete runs.
func Bound(recs []Record) (LowerBound, bool) {
	var w *Record
	minCPU := math.Inf(1)
	for i, r := range recs {
		if r.Subject == SubjectWorkload {
			w = &recs[i]
			continue
		}
		if complete(r) && r.F["cpu_s"] > 0 {
			minCPU = math.Min(minCPU, r.F["cpu_s"])
		}
	}
	if w == nil {
		return LowerBound{}, false
	}
	lb := LowerBound{
		CPUSeconds:    w.F["cpu_nominal_s"],
		MemGiBSeconds: w.F["mem_byte_s"] / (1 << 30),
		Cores:         w.F["cores"],
		BudgetGiB:     w.F["budget"] / (1 << 30),
	}
	if !math.IsInf(minCPU, 1) && minCPU > lb.CPUSeconds {
		lb.CPUSeconds = minCPU
	}
	lb.Seconds = math.Max(lb.CPUSeconds/lb.Cores, lb.MemGiBSeconds/lb.BudgetGiB)
	return lb, true
}

func complete(r Record) bool {
	return r.F["items_total"] > 0 && r.F["items_done"] >= r.F["items_total"] && r.F["timeout"] == 0
}

func packingFigure(r Record, lb LowerBound) string {
	var ms string
	if complete(r) {
		ms = fmt.Sprintf("%.1f s", r.F["makespan_s"])
		if lb.Seconds > 0 {
			ms += fmt.Sprintf(" (%.2f× LB)", r.F["makespan_s"]/lb.Seconds)
		}
	} else {
		ms = fmt.Sprintf("— (gave up at %.1f s)", r.F["makespan_s"])
		if r.F["timeout"] > 0 {
			ms = fmt.Sprintf("— (stopped at %.0f s)", r.F["makespan_s"])
		}
	}
	s := fmt.Sprintf("makespan %s, items %.0f/%.0f, OOM kills %.0f, peak RSS %.2f GiB, CPU %.1f s (%.0f%%)",
		ms, r.F["items_done"], r.F["items_total"], r.F["oom_kills"], r.F["peak_rss"]/(1<<30), r.F["cpu_s"], r.F["cpu_util"]*100)
	if f := r.F["failures"]; f > 0 {
		s += fmt.Sprintf(", %.0f failed runs", f)
	}
	if r.Note != "" {
		s += " (" + r.Note + ")"
	}
	return s
}

func packingRows(c string, recs []Record) []Row {
	if len(recs) == 0 {
		return nil
	}
	lb, ok := Bound(recs)
	var rows []Row
	if ok {
		rows = append(rows, Row{c, "lower bound",
			fmt.Sprintf("%.1f s = max(%.1f CPU-s / %.0f cores, %.1f GiB·s / %.1f GiB)", lb.Seconds, lb.CPUSeconds, lb.Cores, lb.MemGiBSeconds, lb.BudgetGiB),
			none, none})
	}
	var ctl *Record
	var peers []Record
	for i, r := range recs {
		switch r.Subject {
		case SubjectWorkload:
		case SubjectController:
			ctl = &recs[i]
		default:
			peers = append(peers, r)
		}
	}
	if ctl != nil {
		target, probs := packingTargets(c, *ctl, peers, lb)
		rows = append(rows, Row{c, SubjectController + " (manifests as written)", packingFigure(*ctl, lb), target, verdict(probs)})
	}
	for _, p := range peers {
		rows = append(rows, Row{c, p.Subject, packingFigure(p, lb), none, none})
	}
	return rows
}

func packingTargets(c string, ctl Record, peers []Record, lb LowerBound) (string, []string) {
	var probs []string
	ms := ctl.F["makespan_s"]
	if !complete(ctl) {
		probs = append(probs, fmt.Sprintf("%.0f of %.0f items done", ctl.F["items_done"], ctl.F["items_total"]))
	}
	if k := ctl.F["oom_kills"]; k > 0 {
		probs = append(probs, fmt.Sprintf("%.0f OOM kills", k))
	}
	budget := lb.BudgetGiB * (1 << 30)
	if c == CasePackingA || c == CasePackingC {
		if p := ctl.F["peak_rss"]; budget > 0 && p > budget {
			probs = append(probs, fmt.Sprintf("peak %.2f GiB above the %.1f GiB budget", p/(1<<30), lb.BudgetGiB))
		}
		if lb.Seconds > 0 && ms > 1.10*lb.Seconds {
			probs = append(probs, fmt.Sprintf("%.2f× LB, %.1f s over 1.10× LB", ms/lb.Seconds, ms-1.10*lb.Seconds))
		}
		// The best hand split in each measure, wall time and the CPU its
		// jobs burned, each from whichever split peer did best in it.
		best, name := math.Inf(1), ""
		bestCPU, nameCPU := math.Inf(1), ""
		for _, p := range peers {
			if p.Kind != "split" || !complete(p) {
				continue
			}
			if p.F["makespan_s"] < best {
				best, name = p.F["makespan_s"], p.Subject
			}
			if c := p.F["cpu_s"]; c > 0 && c < bestCPU { // 0: not measured
				bestCPU, nameCPU = c, p.Subject
			}
		}
		if !math.IsInf(best, 1) && ms > best {
			probs = append(probs, fmt.Sprintf("%.1f s slower than %s (%.1f s)", ms-best, name, best))
		}
		if c := ctl.F["cpu_s"]; !math.IsInf(bestCPU, 1) && c > bestCPU {
			probs = append(probs, fmt.Sprintf("%.1f CPU-s more than %s (%.2f×)", c-bestCPU, nameCPU, c/bestCPU))
		}
		return "≤ 1.10× LB, ≤ best hand-split peer in wall time and in CPU-s, 0 OOM, peak ≤ budget, all items", probs
	}
	if c == CasePackingD || c == CasePackingE {
		var ref *Record
		for i := range peers {
			if peers[i].Subject == SubjectControllerExact {
				ref = &peers[i]
			}
		}
		switch {
		case ref == nil || !complete(*ref):
			probs = append(probs, "no complete run declared exactly to compare with")
		case ms > 1.10*ref.F["makespan_s"]:
			probs = append(probs, fmt.Sprintf("%.2f× the exact declaration (%.1f s vs %.1f s)", ms/ref.F["makespan_s"], ms, ref.F["makespan_s"]))
		}
		return "all items, 0 OOM, ≤ 1.10× the same workload declared exactly", probs
	}
	for _, p := range peers {
		if complete(p) && ms >= p.F["makespan_s"] {
			probs = append(probs, fmt.Sprintf("not ahead of %s (%.1f s vs %.1f s)", p.Subject, ms, p.F["makespan_s"]))
		}
	}
	return "ahead of every peer, 0 OOM, all items", probs
}

// Markdown renders the table with the run's header.
func Markdown(rows []Row, m Meta) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## lardon3d-controller benchmark\n\n")
	fmt.Fprintf(&b, "- date: %s\n- machine: `%s`\n- cores: %d, memory: %.1f GiB\n- envelope: %s\n",
		m.Date, m.Uname, m.Nproc, float64(m.MemTotal)/(1<<30), m.Cgroup)
	if m.Scale != 1 || m.MemScale != 1 {
		fmt.Fprintf(&b, "- **scaled run** (--scale %g --mem-scale %g): figures are a smoke test, not the benchmark\n", m.Scale, m.MemScale)
	}
	b.WriteString("\n| case | subject | figure | target | verdict |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Case, esc(r.Subject), esc(r.Figure), esc(r.Target), esc(r.Verdict))
	}
	if len(m.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range m.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func fmtDuration(sec float64) string {
	switch {
	case sec >= 1:
		return fmt.Sprintf("%.2f s", sec)
	case sec >= 1e-3:
		return fmt.Sprintf("%.2f ms", sec*1e3)
	case sec >= 1e-6:
		return fmt.Sprintf("%.2f µs", sec*1e6)
	default:
		return fmt.Sprintf("%.0f ns", sec*1e9)
	}
}
