package reconcile

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// phaseGauge records the last count of tasks per phase the controller
// reported.
type phaseGauge struct {
	noMetrics
	mu     sync.Mutex
	counts map[v1alpha1.Phase]int
}

func (g *phaseGauge) SetPhases(counts map[v1alpha1.Phase]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.counts = maps.Clone(counts)
}

func (g *phaseGauge) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprint(g.counts)
}

// TestPhaseGaugeFollowsEveryChange: the gauge is recounted only after a
// change (countPhases), so each kind of change must reach it on its own,
// with nothing after it: a phase change, a manifest added, a duplicate
// rejected, one renamed, one deleted.
func TestPhaseGaugeFollowsEveryChange(t *testing.T) {
	g := &phaseGauge{}
	h := newHarness(t, Config{})
	h.metrics = g
	want := func(what string, counts map[v1alpha1.Phase]int) {
		t.Helper()
		h.eventually(what+": gauge "+fmt.Sprint(counts)+", last "+g.String(), func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return maps.Equal(g.counts, counts)
		})
	}
	h.write("a.yaml", manifest("a", "true", ""))
	h.write("b.yaml", manifest("b", "true", ""))
	h.start()
	want("two tasks run", map[v1alpha1.Phase]int{v1alpha1.PhaseDone: 2})
	h.write("dup.yaml", manifest("a", "true", ""))
	want("a duplicate", map[v1alpha1.Phase]int{v1alpha1.PhaseDone: 2, v1alpha1.PhaseRejected: 1})
	if err := os.Rename(filepath.Join(h.dir, "dup.yaml"), filepath.Join(h.dir, "dup2.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(h.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	want("b deleted, the duplicate renamed", map[v1alpha1.Phase]int{v1alpha1.PhaseDone: 1, v1alpha1.PhaseRejected: 1})
	if err := os.Remove(filepath.Join(h.dir, "dup2.yaml")); err != nil {
		t.Fatal(err)
	}
	want("the duplicate deleted", map[v1alpha1.Phase]int{v1alpha1.PhaseDone: 1})
	h.write("c.yaml", manifest("c", "sleep 30", "  paused: true\n"))
	want("a paused task added", map[v1alpha1.Phase]int{v1alpha1.PhaseDone: 1, v1alpha1.PhasePending: 1})
	// A copy of a finished manifest under another name is Done as it
	// comes: no phase changes, only an entry is added.
	data, err := os.ReadFile(filepath.Join(h.dir, "a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	copied := strings.Replace(string(data), "metadata: {name: a}", "metadata: {name: e}", 1)
	if copied == string(data) {
		t.Fatalf("a.yaml has no name to replace:\n%s", data)
	}
	h.write("e.yaml", copied)
	want("a finished manifest copied", map[v1alpha1.Phase]int{v1alpha1.PhaseDone: 2, v1alpha1.PhasePending: 1})
}
