package workload

import (
	"math"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

var full = Params{Scale: 1, MemScale: 1}

func TestWorkloadAMatchesTheIssue(t *testing.T) {
	a := A(full)
	if len(a) != 20 {
		t.Fatalf("%d tasks", len(a))
	}
	s := Sum(a)
	if s.Items != 1280 {
		t.Fatalf("%d items", s.Items)
	}
	if s.CPUSeconds < 255.9 || s.CPUSeconds > 256.1 {
		t.Fatalf("cpu %v", s.CPUSeconds)
	}
	if s.MaxWhole != 300*MiB+64*60*MiB {
		t.Fatalf("whole %d", s.MaxWhole)
	}
	if Slots(s.MaxWhole, full.Budget()) != 1 {
		t.Fatal("only one whole task of A fits 8 GiB")
	}
}

func TestWorkloadBIsDeterministicAndBounded(t *testing.T) {
	b1, b2 := B(full), B(full)
	if len(b1) != 10 {
		t.Fatalf("%d tasks", len(b1))
	}
	var minPer, maxPer, minFixed, maxFixed int64 = 1 << 62, 0, 1 << 62, 0
	for i, tk := range b1 {
		if tk != b2[i] {
			t.Fatalf("task %d differs between two draws", i)
		}
		if tk.PerItem < 10*MiB || tk.PerItem > 150*MiB || tk.Fixed < 100*MiB || tk.Fixed > 2*GiB {
			t.Fatalf("task %d out of range: %+v", i, tk)
		}
		if tk.Items < 32 || tk.Items > 64 || tk.CPUPerItem < 100*time.Millisecond || tk.CPUPerItem > 300*time.Millisecond {
			t.Fatalf("task %d out of range: %+v", i, tk)
		}
		minPer, maxPer = min(minPer, tk.PerItem), max(maxPer, tk.PerItem)
		minFixed, maxFixed = min(minFixed, tk.Fixed), max(maxFixed, tk.Fixed)
	}
	if maxPer-minPer < 100*MiB || maxFixed-minFixed < GiB {
		t.Fatalf("B is not mixed: per-item %d..%d fixed %d..%d", minPer, maxPer, minFixed, maxFixed)
	}
	var overBudget, overHalf bool
	for _, tk := range b1 {
		overBudget = overBudget || tk.Whole() > full.Budget()
		overHalf = overHalf || tk.Memory(Split(tk, 2)[0].Items) > full.Budget()/2
	}
	if !overBudget || !overHalf {
		t.Fatalf("B must hold a task over the budget (%v) and a half over half of it (%v)", overBudget, overHalf)
	}
	small := B(Params{Scale: 0.05, MemScale: 1})
	if len(small) != 3 || small[0].Name != b1[0].Name || small[0].Items != b1[0].Items {
		t.Fatalf("scaled B is not a prefix: %+v", small)
	}
}

func TestSplitCoversEveryItemOnce(t *testing.T) {
	tk := Task{Name: "x", Items: 65}
	for n := 1; n <= 70; n++ {
		parts := Split(tk, n)
		next := 0
		for _, p := range parts {
			if p.Start != next || p.Items < 1 {
				t.Fatalf("n=%d: bad part %+v", n, p)
			}
			next += p.Items
		}
		if next != 65 {
			t.Fatalf("n=%d covers %d", n, next)
		}
	}
}

func TestLowerBound(t *testing.T) {
	s := Sum(A(full))
	lb := LowerBound(s.CPUSeconds, s.MemorySeconds, 2, full.Budget())
	if math.Abs(lb-128) > 1e-9 {
		t.Fatalf("A's nominal lower bound is 256 cpu-s on 2 cores, got %v", lb)
	}
	// Memory-bound case: one huge task on many cores.
	m := LowerBound(1, 100*float64(GiB), 64, 8*GiB)
	if m != 12.5 {
		t.Fatalf("memory bound %v", m)
	}
}

func TestManifestsParse(t *testing.T) {
	tk := A(full)[3]
	for _, text := range []string{
		Manifest("/bin/synth", tk, 1),
		TrivialManifest("t-1", "/bin/true"),
		DoneManifest("d-1", "0123456789abcdef", time.Unix(0, 0)),
	} {
		var task v1alpha1.Task
		if err := yaml.UnmarshalStrict([]byte(text), &task); err != nil {
			t.Fatalf("%v\n%s", err, text)
		}
		if task.APIVersion != v1alpha1.APIVersion || task.Kind != v1alpha1.KindTask || len(task.Spec.Command) == 0 {
			t.Fatalf("bad manifest %+v", task)
		}
	}
	var task v1alpha1.Task
	_ = yaml.Unmarshal([]byte(Manifest("/bin/synth", tk, 1)), &task)
	if got := task.Spec.Resources.PerItem.Memory.Value(); got != 60*MiB {
		t.Fatalf("per item %d", got)
	}
	if task.Spec.Resources.Batch.Max != 64 || *task.Spec.Items.Count != 64 {
		t.Fatalf("batch %+v items %v", task.Spec.Resources.Batch, task.Spec.Items.Count)
	}
	_ = yaml.Unmarshal([]byte(DoneManifest("d-1", "0123456789abcdef", time.Unix(0, 0))), &task)
	if task.Status.Phase != v1alpha1.PhaseDone || task.Status.SpecHash != "0123456789abcdef" {
		t.Fatalf("phase %q", task.Status.Phase)
	}
	if !strings.Contains(JobLine("/w", "/s", Split(tk, 2)[1]), "/w a-03-p1 32 32 /s --fixed 300Mi --per-item 60Mi") {
		t.Fatalf("job line %q", JobLine("/w", "/s", Split(tk, 2)[1]))
	}
}

func TestWorkloadsDAndE(t *testing.T) {
	d, e := D(full), E(full)
	if len(d) != 20 || d[0].Fixed != 200*MiB || d[0].PerItem != 50*MiB || d[0].Items != 64 || d[0].Declared != 0.7 {
		t.Fatalf("D %+v", d[0])
	}
	var task v1alpha1.Task
	if err := yaml.UnmarshalStrict([]byte(Manifest("/bin/synth", d[0], 1)), &task); err != nil {
		t.Fatal(err)
	}
	if got := task.Spec.Resources.Fixed.Memory.Value(); got != 140*MiB {
		t.Fatalf("D declares fixed %d, want 0.7 × 200 MiB", got)
	}
	if got := task.Spec.Resources.PerItem.Memory.Value(); got != 35*MiB {
		t.Fatalf("D declares per item %d, want 0.7 × 50 MiB", got)
	}
	task = v1alpha1.Task{}
	if err := yaml.UnmarshalStrict([]byte(Manifest("/bin/synth", e[0], 1)), &task); err != nil {
		t.Fatal(err)
	}
	if task.Spec.Resources.Fixed.Memory != nil || task.Spec.Resources.PerItem.Memory != nil || e[0].Fixed != 300*MiB {
		t.Fatalf("E declares memory: %+v", task.Spec.Resources)
	}
	task = v1alpha1.Task{}
	_ = yaml.UnmarshalStrict([]byte(Manifest("/bin/synth", Exact(d)[0], 1)), &task)
	if got := task.Spec.Resources.PerItem.Memory.Value(); got != 50*MiB {
		t.Fatalf("exact D per item %d", got)
	}
}

// Workload C is A whose memory grows item by item: the same costs
// declared, the synthetic step and the hand-split jobs told to grow.
func TestWorkloadC(t *testing.T) {
	a, c := A(full), C(full)
	if len(c) != len(a) || c[0].Name != "c-00" || !c[0].Grow || c[0].Fixed != a[0].Fixed || c[0].PerItem != a[0].PerItem || c[0].Declared != 1 {
		t.Fatalf("C %+v", c[0])
	}
	if a[0].Grow || strings.Contains(JobLine("/w", "/s", Split(a[0], 2)[0]), "--grow") {
		t.Fatalf("A grows")
	}
	if !strings.HasSuffix(JobLine("/w", "/s", Split(c[0], 2)[0]), " --grow") {
		t.Fatalf("C's job line %q", JobLine("/w", "/s", Split(c[0], 2)[0]))
	}
	var task v1alpha1.Task
	if err := yaml.UnmarshalStrict([]byte(Manifest("/bin/synth", c[0], 1)), &task); err != nil {
		t.Fatal(err)
	}
	if task.Spec.Command[len(task.Spec.Command)-1] != "--grow" || task.Spec.Resources.PerItem.Memory.Value() != 60*MiB {
		t.Fatalf("C's manifest: %v %+v", task.Spec.Command, task.Spec.Resources)
	}
}
