package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/bench/internal/measure"
	"github.com/lardon3d/lardon3d-controller/bench/internal/report"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func sleepMs(n int) { time.Sleep(time.Duration(n) * time.Millisecond) }

func measureCmd(args []string) error {
	fs := flag.NewFlagSet("measure", flag.ContinueOnError)
	state := fs.String("state", "", "cgroup state file")
	results := fs.String("results", "", "results file to append to")
	cs := fs.String("case", "", "case name")
	subject := fs.String("subject", "", "subject name")
	kind := fs.String("kind", "", "peer kind: split, whole, naive")
	doneLog := fs.String("done-log", "", "file where the part wrapper logs 'ok NAME N' / 'fail NAME RC'")
	spool := fs.String("spool", "", "spool whose manifests' status.progress.itemsDone count as items done")
	itemsTotal := fs.Int64("items-total", 0, "items the run must do")
	exitMeansDone := fs.Bool("exit0-means-done", false, "count every item done when the command exits 0")
	timeout := fs.Duration("timeout", 0, "kill the run after this long (0: never)")
	interval := fs.Duration("interval", 50*time.Millisecond, "sampling interval")
	makespanFile := fs.String("makespan-file", "", "write the wall seconds here (for a later --timeout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(fs.Args()) == 0 || *state == "" || *results == "" {
		return fmt.Errorf("need --state, --results and a command: %w", errUsage)
	}
	cg, err := loadCgroup(*state)
	if err != nil {
		return err
	}
	if p, _ := cg.Pids(); len(p) > 0 {
		killLeftovers(cg)
	}
	if err := cg.Reclaim(); err != nil {
		fmt.Fprintf(os.Stderr, "benchkit measure: %v (continuing)\n", err)
	}
	oom0, err := cg.OOMKills()
	if err != nil {
		return err
	}
	cpu0, hasCPU := cg.CPUNanos()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own binary: %w", err)
	}
	cmd := exec.Command(self, append([]string{"enter", "--state", *state, "--"}, fs.Args()...)...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = os.Stdout, os.Stderr, nil
	sampler := measure.NewSampler(measure.NewProc("/proc"), cg, os.Getpid())
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %v: %w", fs.Args(), err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	var deadline <-chan time.Time
	if *timeout > 0 {
		deadline = time.After(*timeout)
	}
	timedOut := false
	var waitErr error
loop:
	for {
		select {
		case <-tick.C:
			sampler.Step()
		case <-deadline:
			timedOut = true
			killLeftovers(cg)
		case waitErr = <-done:
			break loop
		}
	}
	wall := time.Since(start).Seconds()
	sampler.Step()
	left := killLeftovers(cg)
	exitCode := 0
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		exitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exitCode = 128 + int(ws.Signal())
		}
	} else if waitErr != nil {
		return waitErr
	}
	oom1, _ := cg.OOMKills()
	cpuS := sampler.SampledCPUSeconds()
	if hasCPU {
		cpu1, _ := cg.CPUNanos()
		cpuS = float64(cpu1-cpu0) / 1e9
	}
	var itemsDone, failures int64
	note := ""
	switch {
	case *doneLog != "":
		itemsDone, failures, err = countDoneLog(*doneLog)
	case *spool != "":
		itemsDone, failures, err = countSpool(*spool)
	case *exitMeansDone && exitCode == 0:
		itemsDone = *itemsTotal
	case *exitMeansDone:
		note = fmt.Sprintf("exit %d", exitCode)
	}
	if err != nil {
		note = err.Error()
	}
	if timedOut {
		note = strings.TrimSpace(note + fmt.Sprintf(" stopped after %s", *timeout))
	}
	cores := float64(numCPU())
	rec := report.Record{Case: *cs, Subject: *subject, Kind: *kind, Note: note, F: map[string]float64{
		"makespan_s":  wall,
		"wall_s":      wall,
		"items_done":  float64(itemsDone),
		"items_total": float64(*itemsTotal),
		"n":           float64(*itemsTotal),
		"failed":      float64(*itemsTotal - itemsDone),
		"failures":    float64(failures),
		"oom_kills":   float64(oom1 - oom0),
		"peak_rss":    float64(sampler.Peak()),
		"cpu_s":       cpuS,
		"cpu_util":    cpuS / (wall * cores),
		"exit_code":   float64(exitCode),
		"samples":     float64(sampler.Samples()),
		"leftovers":   float64(left),
	}}
	if timedOut {
		rec.F["timeout"] = 1
	}
	if *makespanFile != "" {
		if err := os.WriteFile(*makespanFile, []byte(fmt.Sprintf("%.3f\n", wall)), 0o644); err != nil {
			return fmt.Errorf("measure: %w", err)
		}
	}
	fmt.Printf("  %-40s %7.1f s  items %d/%d  oom %d  peak %.2f GiB  cpu %.1f s (%.0f%%)  exit %d %s\n",
		*subject, wall, itemsDone, *itemsTotal, oom1-oom0, float64(sampler.Peak())/(1<<30), cpuS, 100*cpuS/(wall*cores), exitCode, note)
	return report.Append(*results, rec)
}

// countDoneLog sums the items of distinct parts logged "ok NAME N" and counts
// "fail NAME RC" lines.
func countDoneLog(path string) (done, failures int64, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read done log: %w", err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) != 3 {
			continue
		}
		switch fl[0] {
		case "ok":
			n, err := strconv.ParseInt(fl[2], 10, 64)
			if err == nil && !seen[fl[1]] {
				seen[fl[1]] = true
				done += n
			}
		case "fail":
			failures++
		}
	}
	return done, failures, sc.Err()
}

// countSpool sums status.progress.itemsDone over the spool's manifests and
// counts the tasks that ended Failed or Rejected.
func countSpool(dir string) (done, failed int64, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("read spool: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		b, err := os.ReadFile(dir + "/" + name)
		if err != nil {
			continue
		}
		var t v1alpha1.Task
		if err := yaml.Unmarshal(b, &t); err != nil {
			continue
		}
		done += t.Status.Progress.ItemsDone
		if t.Status.Phase == v1alpha1.PhaseFailed || t.Status.Phase == v1alpha1.PhaseRejected {
			failed++
		}
	}
	return done, failed, nil
}
