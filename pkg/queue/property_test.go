package queue

import (
	"cmp"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// syncQueue is a queue whose admitted tasks are recorded, not run, so that
// scanOnce can be checked as a pure step.
func syncQueue(cfg Config, adm Admitter, obs Observer) (*Queue, *[]string) {
	var admitted []string
	q := New(cfg, adm, nil, obs)
	q.spawn = func(e *entry) { admitted = append(admitted, e.task.Name) }
	return q, &admitted
}

// TestPropertyScanIsFIFOBypassingOnlyWait: for any set of tasks upserted in
// any order (some upserted twice), any budget, any set of tasks the
// governor tells Wait and any MaxParallel, one scan admits exactly what a
// walk in (Seq, Name) order admits when it skips only the tasks told Wait,
// and never exceeds the budget.
func TestPropertyScanIsFIFOBypassingOnlyWait(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 12).Draw(rt, "n")
		budget := rapid.Int64Range(0, 12).Draw(rt, "budget")
		maxParallel := rapid.IntRange(0, 4).Draw(rt, "maxParallel")
		adm := newFakeAdm(budget)
		q, admitted := syncQueue(Config{MaxParallel: maxParallel}, adm, nil)
		type spec struct {
			name string
			seq  int64
			cost int64
			wait bool
		}
		specs := make([]spec, n)
		for i := range specs {
			specs[i] = spec{
				name: fmt.Sprintf("t%02d", i),
				seq:  rapid.Int64Range(0, 4).Draw(rt, "seq"),
				cost: rapid.Int64Range(1, 4).Draw(rt, "cost"),
				wait: rapid.Bool().Draw(rt, "wait"),
			}
			adm.waitFor[specs[i].name] = specs[i].wait
		}
		order := rapid.Permutation(specs).Draw(rt, "upsert order")
		for _, s := range order {
			tk := mkTask(s.name, s.seq, s.cost, s.cost)
			tk.Estimate.BatchMin = s.cost
			if rapid.Bool().Draw(rt, "upsert twice") {
				first := tk
				first.Seq = 99 // replaced before the scan: its place follows the new Seq
				if err := q.Upsert(first); err != nil {
					rt.Fatal(err)
				}
			}
			if err := q.Upsert(tk); err != nil {
				rt.Fatal(err)
			}
		}
		q.scanOnce()

		slices.SortFunc(specs, func(a, b spec) int {
			return cmp.Or(cmp.Compare(a.seq, b.seq), cmp.Compare(a.name, b.name))
		})
		var want []string
		free, running := budget, 0
		for _, s := range specs {
			if maxParallel > 0 && running >= maxParallel {
				break
			}
			if s.wait || s.cost > free {
				continue
			}
			want = append(want, s.name)
			free -= s.cost
			running++
		}
		if !slices.Equal(*admitted, want) {
			rt.Fatalf("admitted %v, want %v", *admitted, want)
		}
		if adm.overBudgetSeen {
			rt.Fatal("over budget")
		}
		if maxParallel > 0 && len(adm.active) > maxParallel {
			rt.Fatalf("%d admitted, max-parallel %d", len(adm.active), maxParallel)
		}
	})
}

// TestPropertyCyclesRejected: for any dependency graph among pending tasks
// (with some dependencies on unknown names), one scan rejects with
// DependencyCycle exactly the tasks that lie on a cycle, and asks the
// governor only for tasks without dependencies.
func TestPropertyCyclesRejected(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 10).Draw(rt, "n")
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("t%d", i)
		}
		deps := make(map[string][]string, n)
		for _, name := range names {
			k := rapid.IntRange(0, 3).Draw(rt, "deps")
			for range k {
				if rapid.IntRange(0, 9).Draw(rt, "missing") == 0 {
					deps[name] = append(deps[name], "ghost")
				} else {
					deps[name] = append(deps[name], rapid.SampledFrom(names).Draw(rt, "dep"))
				}
			}
		}
		adm := newFakeAdm(100)
		for _, name := range names {
			adm.waitFor[name] = true // nothing is admitted: only dependencies matter
		}
		obs := &recorder{}
		q, _ := syncQueue(Config{}, adm, obs)
		for i, name := range names {
			tk := mkTask(name, int64(i), 1, 1)
			tk.DependsOn = deps[name]
			if err := q.Upsert(tk); err != nil {
				rt.Fatal(err)
			}
		}
		q.scanOnce()

		reaches := func(from, to string) bool {
			seen := map[string]bool{}
			stack := slices.Clone(deps[from])
			for len(stack) > 0 {
				x := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if x == to {
					return true
				}
				if !seen[x] {
					seen[x] = true
					stack = append(stack, deps[x]...)
				}
			}
			return false
		}
		for _, name := range names {
			onCycle := reaches(name, name)
			st := stateOf(q, name)
			if onCycle != (st.Phase == v1alpha1.PhaseRejected) {
				rt.Fatalf("%s: on a cycle %v, phase %s (%s)", name, onCycle, st.Phase, st.Message)
			}
			if onCycle && st.Reason != v1alpha1.ReasonDependencyCycle {
				rt.Fatalf("%s rejected with %s", name, st.Reason)
			}
			if asked := adm.asked(name) > 0; asked != (len(deps[name]) == 0) {
				rt.Fatalf("%s asked the governor: %v, with dependencies %v", name, asked, deps[name])
			}
		}
	})
}
