package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// Twenty tasks of one profile (lardon3d-synth: 96 MiB + 24 MiB per item),
// under --memory-capacity 4Gi: stated with no resources at all, or at
// twice their real costs with estimate: learned. Every task ends Done, no
// batch reserves more than the machine can grant, and once the first
// batches are measured every contract is within 25 % of the batch's real
// peak (read back from the history store the run leaves).
func TestLearnedEstimatesEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name, resources string
	}{
		{"no-resources", ""},
		{"declared-twice-learned", "  resources: {fixed: {memory: 192Mi}, perItem: {memory: 48Mi}, estimate: learned}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spool := newSpool(t)
			for i := range 20 {
				writeManifest(t, spool, fmt.Sprintf("t%02d.yaml", i), fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: t%02d}
spec:
  command: [lardon3d-synth, --fixed, 96Mi, --per-item, 24Mi, --cpu-per-item, 10ms, --hold, 250ms]
  items: {count: 16}
%s`, i, tc.resources))
			}
			c := startController(t, spool, "--exit-when-done", "--memory-capacity", "4Gi")
			if code := c.wait(t, 4*time.Minute); code != 0 {
				t.Fatalf("exit code %d", code)
			}
			for i := range 20 {
				task := readTask(t, filepath.Join(spool, fmt.Sprintf("t%02d.yaml", i)))
				if task.Status.Phase != v1alpha1.PhaseDone {
					t.Errorf("t%02d: %s %+v", i, task.Status.Phase, task.Status.Conditions)
				}
			}
			all := testHistory(t, spool)
			recs := all["custom/lardon3d-synth"]
			if len(recs) < 20 {
				t.Fatalf("history holds %d batches of custom/lardon3d-synth (profiles %v)", len(recs), keysOf(all))
			}
			sort.SliceStable(recs, func(i, j int) bool { return recs[i].Time.Before(recs[j].Time) })
			var lines []string
			const firstBatches = 6
			far := 0
			for i, r := range recs {
				ratio := float64(r.LimitBytes) / float64(max(r.PeakMemoryBytes, 1))
				lines = append(lines, fmt.Sprintf("%2d %-4s items %2d reserved %4d MiB peak %4d MiB ratio %.2f %s", i, r.Task, r.Items, r.LimitBytes>>20, r.PeakMemoryBytes>>20, ratio, r.Reason))
				if r.LimitBytes > 3584<<20 {
					t.Errorf("batch %d reserved %d MiB, more than the 4Gi capacity less its 512Mi margin", i, r.LimitBytes>>20)
				}
				if r.KilledForMemory {
					t.Errorf("batch %d was killed for memory", i)
				}
				if i >= firstBatches && (ratio > 1.25 || ratio < 1) {
					far++
				}
			}
			t.Logf("batches in order:\n%s", strings.Join(lines, "\n"))
			if far > 0 {
				t.Errorf("%d of the %d batches after the first %d had a contract not within [1, 1.25] × their peak", far, len(recs)-firstBatches, firstBatches)
			}
			// The estimates verb tells the same story.
			est, err := reconcile.ReadEstimates(filepath.Join(spool, ".lardon3d"), testHistoryPath(spool))
			if err != nil || len(est) != 1 || !est[0].OK {
				t.Fatalf("estimates: %+v, %v", est, err)
			}
			if tc.resources == "" {
				// The slow start ran batches of several sizes: a firm fit.
				if est[0].State != "firm" {
					t.Errorf("state %s, want firm", est[0].State)
				}
				if got := float64(est[0].FittedPerItem) / (24 << 20); got < 0.95 || got > 1.05 {
					t.Errorf("fitted per item %d MiB, want 24 MiB within 5%%", est[0].FittedPerItem>>20)
				}
			}
			out, code := runCLI(t, "estimates", "--spool", spool)
			if code != 0 || !strings.Contains(out, "custom/lardon3d-synth") || !strings.Contains(out, "resources: {fixed:") {
				t.Errorf("estimates verb (exit %d):\n%s", code, out)
			}
			out, code = runCLI(t, "describe", "t19", "--spool", spool)
			if code != 0 || !strings.Contains(out, "Measured:") || !strings.Contains(out, "Suggested:") || !strings.Contains(out, "Efficiency:") {
				t.Errorf("describe (exit %d):\n%s", code, out)
			}
		})
	}
}

func keysOf(m map[string][]history.Record) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// synthTask is a manifest of a lardon3d-synth task (96 MiB + 24 MiB per
// item) with the given resources lines.
func synthTask(name string, items int, resources string) string {
	return fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s}
spec:
  command: [lardon3d-synth, --fixed, 96Mi, --per-item, 24Mi, --cpu-per-item, 10ms, --hold, 300ms]
  items: {count: %d}
%s`, name, items, resources)
}

// A declaration at 0.7× the real costs: declared (the default) retries
// each killed batch under its measured need and ends Done, with an
// EstimateTooLow condition saying by how much and what to declare;
// strict fails as before.
func TestDeclaredTooLowIsRetriedNotFailed(t *testing.T) {
	spool := newSpool(t)
	low := "  resources: {fixed: {memory: 67Mi}, perItem: {memory: 17Mi}, batch: {max: 8}%s}\n"
	writeManifest(t, spool, "low.yaml", synthTask("low", 16, fmt.Sprintf(low, "")))
	writeManifest(t, spool, "strict.yaml", synthTask("strict", 16, fmt.Sprintf(low, ", estimate: strict, profile: strict-synth")))
	c := startController(t, spool, "--exit-when-done", "--memory-capacity", "4Gi")
	if code := c.wait(t, 3*time.Minute); code != 1 {
		t.Fatalf("exit code %d, want 1 (the strict task fails)", code)
	}
	task := readTask(t, filepath.Join(spool, "low.yaml"))
	if task.Status.Phase != v1alpha1.PhaseDone {
		t.Fatalf("low: %s %+v", task.Status.Phase, task.Status.Conditions)
	}
	var cond string
	for _, c := range task.Status.Conditions {
		if c.Type == v1alpha1.ConditionEstimateLow && c.Status == "True" {
			cond = c.Message
		}
	}
	t.Logf("EstimateTooLow: %s", cond)
	if !strings.Contains(cond, "killed for memory") || !strings.Contains(cond, "% more") || !strings.Contains(cond, "suggested: resources: {fixed:") {
		t.Errorf("EstimateTooLow condition: %q", cond)
	}
	strict := readTask(t, filepath.Join(spool, "strict.yaml"))
	if strict.Status.Phase != v1alpha1.PhaseFailed || !strings.Contains(strict.Status.LastBatch.Reason, v1alpha1.ReasonMemoryExceeded) {
		t.Errorf("strict: %s, last batch %+v", strict.Status.Phase, strict.Status.LastBatch)
	}
}

// The history survives a restart: tasks of a known profile start at the
// learned need, not at a provisional guess.
func TestHistorySurvivesRestart(t *testing.T) {
	spool := newSpool(t)
	for i := range 3 {
		writeManifest(t, spool, fmt.Sprintf("a%d.yaml", i), synthTask(fmt.Sprintf("a%d", i), 8, ""))
	}
	if code := startController(t, spool, "--exit-when-done", "--memory-capacity", "4Gi").wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("first run: exit %d", code)
	}
	for i := range 2 {
		writeManifest(t, spool, fmt.Sprintf("b%d.yaml", i), synthTask(fmt.Sprintf("b%d", i), 8, ""))
	}
	if code := startController(t, spool, "--exit-when-done", "--memory-capacity", "4Gi").wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("second run: exit %d", code)
	}
	all := testHistory(t, spool)
	seen := 0
	for _, r := range all["custom/lardon3d-synth"] {
		if !strings.HasPrefix(r.Task, "b") {
			continue
		}
		seen++
		if ratio := float64(r.LimitBytes) / float64(r.PeakMemoryBytes); ratio > 1.25 || ratio < 1 {
			t.Errorf("after the restart, %s ran %d items under %d MiB for a peak of %d MiB", r.Task, r.Items, r.LimitBytes>>20, r.PeakMemoryBytes>>20)
		}
	}
	if seen < 2 {
		t.Fatalf("the second run's batches are not in the history (%d)", seen)
	}
}

// Two tasks of one profile (the same binary) at different costs, each
// declared with room for the step's own runtime: once the profile's
// history holds the large task's batches of two sizes, the small task's
// batches still reserve what it declared, not a fit pooled over the large
// one (packing B's small tasks got up to 3.7 GiB for one item that way).
func TestDeclarationsOfOneProfileStandEndToEnd(t *testing.T) {
	spool := newSpool(t)
	task := func(name, fixed, perItem, declaredFixed string, items int) string {
		return fmt.Sprintf(`apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %s}
spec:
  command: [lardon3d-synth, --fixed, %s, --per-item, %s, --cpu-per-item, 10ms, --hold, 300ms]
  items: {count: %d}
  resources: {fixed: {memory: %s}, perItem: {memory: %s}, batch: {max: 4}}
`, name, fixed, perItem, items, declaredFixed, perItem)
	}
	writeManifest(t, spool, "large.yaml", task("large", "256Mi", "32Mi", "288Mi", 10))
	if code := startController(t, spool, "--exit-when-done", "--memory-capacity", "4Gi").wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("first run: exit %d", code)
	}
	writeManifest(t, spool, "small.yaml", task("small", "16Mi", "4Mi", "48Mi", 8))
	if code := startController(t, spool, "--exit-when-done", "--memory-capacity", "4Gi").wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("second run: exit %d", code)
	}
	sizes := map[int64]bool{}
	small := 0
	for _, r := range testHistory(t, spool)["custom/lardon3d-synth"] {
		switch r.Task {
		case "large":
			sizes[r.Items] = true
		case "small":
			small++
			if want := 48<<20 + 4<<20*r.Items; r.LimitBytes != want || !r.Succeeded() {
				t.Errorf("small's batch of %d items reserved %d MiB (exit %d %s), want its declaration, %d MiB", r.Items, r.LimitBytes>>20, r.ExitCode, r.Reason, want>>20)
			}
		}
	}
	if len(sizes) < 2 || small < 2 {
		t.Fatalf("history: large ran batches of %d sizes, small %d batches; want 2 sizes and 2 batches or more", len(sizes), small)
	}
	if task := readTask(t, filepath.Join(spool, "small.yaml")); task.Status.Phase != v1alpha1.PhaseDone {
		t.Errorf("small: %s %+v", task.Status.Phase, task.Status.Conditions)
	}
}
