package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/bench/internal/report"
	"github.com/lardon3d/lardon3d-controller/bench/internal/workload"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// react drops --n trivial manifests, one at a time, into the spool of a
// controller that is already running, and times each from the rename that
// publishes it until the file's status shows Running (or a later phase: a
// one-item `true` may go Running -> Done between two looks) and Done. It
// looks on every fsnotify event for the file and every 2 ms besides.
func react(args []string) error {
	fs := flag.NewFlagSet("react", flag.ContinueOnError)
	spool := fs.String("spool", "", "spool of the running controller")
	n := fs.Int("n", 200, "drops")
	results := fs.String("results", "", "results file")
	perDrop := fs.Duration("timeout", 10*time.Second, "give up on a drop after this long")
	prefix := fs.String("prefix", "react", "manifest name prefix (each drop needs a new name)")
	direct := fs.Bool("direct", false, "write each manifest in place in one go (open, write, close) instead of renaming a temporary file into place")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *spool == "" || *results == "" {
		return fmt.Errorf("need --spool and --results: %w", errUsage)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("react: %w", err)
	}
	defer w.Close()
	if err := w.Add(*spool); err != nil {
		return fmt.Errorf("react: watch %s: %w", *spool, err)
	}
	var toRun, toDone []float64
	missed, sawRunning := 0, 0
	for i := 0; i < *n; i++ {
		name := fmt.Sprintf("%s-%04d", *prefix, i)
		final := filepath.Join(*spool, name+".yaml")
		body := []byte(workload.TrivialManifest(name, "/bin/true"))
		var t0 time.Time
		if *direct {
			t0 = time.Now()
			if err := os.WriteFile(final, body, 0o644); err != nil {
				return fmt.Errorf("react: %w", err)
			}
		} else {
			tmp := filepath.Join(*spool, "."+name+".yaml.tmp")
			if err := os.WriteFile(tmp, body, 0o644); err != nil {
				return fmt.Errorf("react: %w", err)
			}
			t0 = time.Now()
			if err := os.Rename(tmp, final); err != nil {
				return fmt.Errorf("react: %w", err)
			}
		}
		run, done, seen := waitPhases(w, final, t0, *perDrop)
		if seen {
			sawRunning++
		}
		if run < 0 || done < 0 {
			missed++
			if run < 0 {
				continue
			}
		}
		toRun = append(toRun, run)
		if done >= 0 {
			toDone = append(toDone, done)
		}
	}
	f := map[string]float64{"n": float64(len(toRun)), "missed": float64(missed), "saw_running": float64(sawRunning)}
	for _, q := range []struct {
		key string
		xs  []float64
		p   float64
	}{{"p50_running_ms", toRun, 50}, {"p99_running_ms", toRun, 99}, {"p50_done_ms", toDone, 50}, {"p99_done_ms", toDone, 99}} {
		if v, err := report.Percentile(q.xs, q.p); err == nil {
			f[q.key] = v
		}
	}
	note := ""
	if missed > 0 {
		note = fmt.Sprintf("%d drops not Done within %s (or Failed/Rejected)", missed, *perDrop)
	}
	fmt.Printf("  reaction: %d drops, to Running p50 %.1f ms p99 %.1f ms, to Done p50 %.1f ms p99 %.1f ms, Running seen in the file %d times, missed %d\n",
		*n, f["p50_running_ms"], f["p99_running_ms"], f["p50_done_ms"], f["p99_done_ms"], sawRunning, missed)
	return report.Append(*results, report.Record{Case: report.CaseReaction, Subject: report.SubjectController, F: f, Note: note})
}

// waitPhases returns the milliseconds from t0 to the first look showing
// Running (or Done) and to Done, -1 for what was not seen before the timeout
// or before the task ended Failed or Rejected, and whether Running itself was
// ever seen in the file.
func waitPhases(w *fsnotify.Watcher, path string, t0 time.Time, timeout time.Duration) (run, done float64, sawRunning bool) {
	run, done = -1, -1
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	look := func() bool {
		ph := phaseOf(path)
		ms := float64(time.Since(t0).Microseconds()) / 1000
		switch ph {
		case v1alpha1.PhaseRunning:
			sawRunning = true
			if run < 0 {
				run = ms
			}
		case v1alpha1.PhaseDone:
			if run < 0 {
				run = ms // Running came and went between two looks
			}
			done = ms
			return true
		case v1alpha1.PhaseFailed, v1alpha1.PhaseRejected:
			return true // a trivial task must not fail: counted as missed
		}
		return false
	}
	for {
		select {
		case ev := <-w.Events:
			if filepath.Clean(ev.Name) != path {
				continue
			}
		case <-w.Errors:
		case <-tick.C:
		case <-deadline:
			return run, done, sawRunning
		}
		if look() {
			return run, done, sawRunning
		}
	}
}

func phaseOf(path string) v1alpha1.Phase {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var t v1alpha1.Task
	if err := yaml.Unmarshal(b, &t); err != nil {
		return ""
	}
	return t.Status.Phase
}
