package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/lardon3d/lardon3d-controller/bench/internal/measure"
	"github.com/lardon3d/lardon3d-controller/bench/internal/report"
)

// idle waits for the process to settle (a 1 s window under 2% of a core, at
// most --settle), then reads its CPU over --seconds and its resident memory.
func idle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	pid := fs.Int("pid", 0, "process to watch")
	seconds := fs.Float64("seconds", 60, "measurement window")
	settle := fs.Duration("settle", 120*time.Second, "longest wait for the start-up burst to end")
	files := fs.Int("files", 0, "manifests in the spool (for the record)")
	results := fs.String("results", "", "results file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pid == 0 || *results == "" {
		return fmt.Errorf("need --pid and --results: %w", errUsage)
	}
	proc := measure.NewProc("/proc")
	fail := func(err error) error {
		_ = report.Append(*results, report.Record{Case: report.CaseIdle, Subject: report.SubjectController, Note: err.Error(), F: map[string]float64{}})
		return err
	}
	start := time.Now()
	for {
		a, err := proc.Stat(*pid)
		if err != nil {
			return fail(fmt.Errorf("controller gone while settling: %w", err))
		}
		time.Sleep(time.Second)
		b, err := proc.Stat(*pid)
		if err != nil {
			return fail(fmt.Errorf("controller gone while settling: %w", err))
		}
		if float64(b.CPUTicks()-a.CPUTicks())/measure.ClockTicks < 0.02 || time.Since(start) > *settle {
			break
		}
	}
	settled := time.Since(start)
	a, err := proc.Stat(*pid)
	if err != nil {
		return fail(err)
	}
	t0 := time.Now()
	var maxRSS int64
	end := t0.Add(time.Duration(*seconds * float64(time.Second)))
	for time.Now().Before(end) {
		if r, err := proc.RSS(*pid); err == nil && r > maxRSS {
			maxRSS = r
		}
		time.Sleep(min(time.Second, time.Until(end)))
	}
	b, err := proc.Stat(*pid)
	if err != nil {
		return fail(fmt.Errorf("controller gone during the window: %w", err))
	}
	el := time.Since(t0).Seconds()
	rss, _ := proc.RSS(*pid)
	hwm, _ := proc.HWM(*pid)
	maxRSS = max(maxRSS, rss)
	cpuPct := 100 * float64(b.CPUTicks()-a.CPUTicks()) / measure.ClockTicks / el
	fmt.Printf("  idle: settled after %.1f s; over %.1f s: CPU %.3f%% of a core, RSS %.1f MB (max in window %.1f MB, VmHWM %.1f MB)\n",
		settled.Seconds(), el, cpuPct, float64(rss)/1e6, float64(maxRSS)/1e6, float64(hwm)/1e6)
	return report.Append(*results, report.Record{Case: report.CaseIdle, Subject: report.SubjectController, F: map[string]float64{
		"seconds": el, "cpu_pct": cpuPct, "rss_mb": float64(maxRSS) / 1e6, "hwm_mb": float64(hwm) / 1e6,
		"files": float64(*files), "settle_s": settled.Seconds(),
	}})
}
