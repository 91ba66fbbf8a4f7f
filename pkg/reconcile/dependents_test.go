package reconcile

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// dependentsByScan is what dependentsOf answered before it had an index:
// every entry whose task names name in dependsOn, in name then path
// order.
func dependentsByScan(t *taskTable, name string) []*entry {
	var out []*entry
	for _, d := range t.entries {
		if d.task != nil && slices.Contains(d.task.Spec.DependsOn, name) {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].name < out[j].name || out[i].name == out[j].name && out[i].path < out[j].path
	})
	return out
}

// The dependents index answers what a scan of every entry answers, after
// any sequence of new manifests, edits of dependsOn, duplicates (an entry
// replaced at its path), renames and deletions (fixed seeds).
func TestDependentsIndexMatchesAScan(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tt := newTaskTable()
		names := []string{"a", "b", "c", "d", "e", "f"}
		task := func() *v1alpha1.Task {
			var deps []string
			for _, n := range names {
				if rng.IntN(3) == 0 {
					deps = append(deps, n)
				}
			}
			return &v1alpha1.Task{Spec: v1alpha1.TaskSpec{DependsOn: deps}}
		}
		path := func() string { return fmt.Sprintf("/s/%d.yaml", rng.IntN(10)) }
		for step := range 400 {
			switch rng.IntN(5) {
			case 0: // a new manifest (or one replacing the entry at its path)
				p := path()
				e := &entry{path: p, name: names[rng.IntN(len(names))]}
				if rng.IntN(2) == 0 {
					tt.setTask(e, task()) // parsed before its place
				}
				tt.put(p, e)
				if e.task == nil {
					tt.setTask(e, task())
				}
			case 1, 2: // an edit
				if e := tt.entries[path()]; e != nil {
					tt.setTask(e, task())
				}
			case 3: // a rename
				from, to := path(), path()
				if e := tt.entries[from]; e != nil && tt.entries[to] == nil {
					tt.drop(from)
					e.path = to
					tt.put(to, e)
				}
			case 4: // a deletion
				tt.drop(path())
			}
			for _, n := range names {
				got, want := tt.dependentsOf(n), dependentsByScan(&tt, n)
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: dependents of %s: index %d entries, scan %d", seed, step, n, len(got), len(want))
				}
			}
		}
	}
}
