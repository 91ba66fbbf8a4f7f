package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// MiB is a mebibyte.
const MiB = int64(1) << 20

// GiB is a gibibyte.
const GiB = int64(1) << 30

// Task is one photogrammetry-like task of the synthetic step: memory is
// Fixed once per process plus PerItem for each item of the batch, and each
// item burns CPUPerItem on one thread.
type Task struct {
	// Name is the task's name, also the manifest's file name.
	Name string
	// Items is the number of items.
	Items int
	// Fixed is the memory paid once per batch, in bytes.
	Fixed int64
	// PerItem is the memory paid per item of a batch, in bytes.
	PerItem int64
	// CPUPerItem is the CPU time per item.
	CPUPerItem time.Duration
	// Declared is the share of the real memory costs the manifest states:
	// 1 exact, 0.7 under-declared, 0 none (the controller learns them).
	Declared float64
	// Grow maps each item's memory when its turn comes (lardon3d-synth
	// --grow): the batch's memory grows item by item to the same peak.
	Grow bool
}

// Memory is the memory a batch of n items needs.
func (t Task) Memory(n int) int64 { return t.Fixed + int64(n)*t.PerItem }

// Whole is the memory of the whole task run as one batch.
func (t Task) Whole() int64 { return t.Memory(t.Items) }

// Params scales a workload: Scale shrinks task counts and CPU per item (for
// smoke tests), MemScale shrinks every memory figure and the budget alike.
type Params struct {
	// Scale multiplies task counts and CPU per item; 1 is the full run.
	Scale float64
	// MemScale multiplies memory sizes and the budget; 1 is the full run.
	MemScale float64
}

func (p Params) count(n int, min int) int {
	c := int(math.Round(float64(n) * p.Scale))
	if c < min {
		c = min
	}
	if c > n && p.Scale <= 1 {
		c = n
	}
	return c
}

func (p Params) mem(b int64) int64 {
	m := int64(math.Round(float64(b) * p.MemScale / float64(MiB)))
	if m < 1 {
		m = 1
	}
	return m * MiB
}

func (p Params) cpu(d time.Duration) time.Duration {
	c := time.Duration(float64(d) * p.Scale).Round(time.Millisecond)
	if c < time.Millisecond {
		c = time.Millisecond
	}
	return c
}

// Budget is the memory envelope: 8 GiB scaled.
func (p Params) Budget() int64 { return p.mem(8 * GiB) }

// A is workload A: 20 tasks x 64 items, 300 MiB fixed, 60 MiB per item,
// 0.2 CPU-seconds per item (a whole task needs about 4.04 GiB).
func A(p Params) []Task {
	n := p.count(20, 2)
	out := make([]Task, n)
	for i := range out {
		out[i] = Task{
			Name:       fmt.Sprintf("a-%02d", i),
			Items:      64,
			Fixed:      p.mem(300 * MiB),
			PerItem:    p.mem(60 * MiB),
			CPUPerItem: p.cpu(200 * time.Millisecond),
			Declared:   1,
		}
	}
	return out
}

// C is workload C: workload A whose memory grows item by item (the
// fixed cost up front, each item's when its turn comes), to the same
// peak.
func C(p Params) []Task {
	out := A(p)
	for i := range out {
		out[i].Name = fmt.Sprintf("c-%02d", i)
		out[i].Grow = true
	}
	return out
}

// D is workload D: a memory-bound variant of A, 20 tasks x 64 items,
// 200 MiB fixed, 50 MiB per item, 0.1 CPU-seconds per item, declared at
// 0.7x its real costs (every batch overruns its contract).
func D(p Params) []Task {
	n := p.count(20, 2)
	out := make([]Task, n)
	for i := range out {
		out[i] = Task{
			Name:       fmt.Sprintf("d-%02d", i),
			Items:      64,
			Fixed:      p.mem(200 * MiB),
			PerItem:    p.mem(50 * MiB),
			CPUPerItem: p.cpu(100 * time.Millisecond),
			Declared:   0.7,
		}
	}
	return out
}

// E is workload E: workload A with no memory declared at all.
func E(p Params) []Task {
	out := A(p)
	for i := range out {
		out[i].Name = fmt.Sprintf("e-%02d", i)
		out[i].Declared = 0
	}
	return out
}

// Exact returns tasks declared at their real costs (the reference runs of
// D and E).
func Exact(tasks []Task) []Task {
	out := append([]Task(nil), tasks...)
	for i := range out {
		out[i].Declared = 1
	}
	return out
}

// BSeed seeds workload B's generator; B is the same on every machine and
// every Go version (PCG is specified).
const BSeed = 20260601

// B is workload B: a deterministic mix of 10 tasks. Fixed cost (100 MiB to
// 2 GiB) and per-item cost (10 to 150 MiB) are stratified (one task in each
// tenth of each range, paired by a seeded shuffle) so the mix spans both
// ranges on every draw; items are in [32, 64] and CPU per item in
// [0.1, 0.3] s. Some whole tasks exceed the budget and some halves exceed
// half of it, so no single hand-picked split suits them all.
func B(p Params) []Task {
	r := rand.New(rand.NewPCG(BSeed, 0))
	const total = 10
	fixedSlot, perItemSlot := r.Perm(total), r.Perm(total)
	n := p.count(total, 3)
	out := make([]Task, 0, n)
	for i := 0; i < total; i++ {
		fixed := (100 + (int64(fixedSlot[i])*1948+r.Int64N(1949))/total) * MiB
		perItem := (10 + (int64(perItemSlot[i])*140+r.Int64N(141))/total) * MiB
		items := 32 + r.IntN(33)
		cpu := time.Duration(100+r.IntN(201)) * time.Millisecond
		if i >= n {
			continue // draw them all so a scaled B is a prefix of the full B
		}
		out = append(out, Task{
			Name:       fmt.Sprintf("b-%02d", i),
			Items:      items,
			Fixed:      p.mem(fixed),
			PerItem:    p.mem(perItem),
			CPUPerItem: p.cpu(cpu),
			Declared:   1,
		})
	}
	return out
}

// Totals sums a workload.
type Totals struct {
	// Items is the number of items.
	Items int
	// CPUSeconds is the nominal CPU time (items times CPU per item).
	CPUSeconds float64
	// MemorySeconds is the least memory-time the work can take, in
	// byte-seconds: every item held with its task's fixed cost for its CPU
	// time (a batch of one is the cheapest in memory-time).
	MemorySeconds float64
	// MaxWhole is the largest whole-task memory.
	MaxWhole int64
}

// Sum totals tasks.
func Sum(tasks []Task) Totals {
	var s Totals
	for _, t := range tasks {
		s.Items += t.Items
		c := t.CPUPerItem.Seconds() * float64(t.Items)
		s.CPUSeconds += c
		s.MemorySeconds += c * float64(t.Memory(1))
		if w := t.Whole(); w > s.MaxWhole {
			s.MaxWhole = w
		}
	}
	return s
}

// LowerBound is max(CPU-seconds / cores, memory-time / budget). cpuSeconds
// is the CPU the work really costs (at least the nominal figure; the caller
// may pass the least CPU any complete run measured, which includes the cost
// of touching the memory).
func LowerBound(cpuSeconds, memorySeconds float64, cores int, budget int64) float64 {
	return math.Max(cpuSeconds/float64(cores), memorySeconds/float64(budget))
}

// Quantity renders bytes in Kubernetes notation (whole MiB: Mi, whole
// KiB: Ki).
func Quantity(b int64) string {
	if b%MiB == 0 {
		return fmt.Sprintf("%dMi", b/MiB)
	}
	if b%1024 == 0 {
		return fmt.Sprintf("%dKi", b/1024)
	}
	return fmt.Sprintf("%d", b)
}

// SynthArgs is the synthetic step's command line for t.
func SynthArgs(synth string, t Task) []string {
	args := []string{synth,
		"--fixed", Quantity(t.Fixed),
		"--per-item", Quantity(t.PerItem),
		"--per-thread", "0",
		"--cpu-per-item", t.CPUPerItem.String(),
	}
	if t.Grow {
		args = append(args, "--grow")
	}
	return args
}

// Manifest renders t as a Task manifest the controller runs as written:
// batch bounds [1, items], one thread, the estimate the step's cost times
// t.Declared (none stated when 0).
func Manifest(synth string, t Task, threads int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: %s\n  labels: {bench: packing}\n", t.Name)
	fmt.Fprintf(&b, "spec:\n  class: custom\n  command: [%s]\n", quoteList(SynthArgs(synth, t)))
	fmt.Fprintf(&b, "  items: {count: %d}\n", t.Items)
	b.WriteString("  resources:\n")
	if t.Declared > 0 {
		fmt.Fprintf(&b, "    fixed: {memory: %s}\n    perItem: {memory: %s}\n    perThread: {memory: \"0\"}\n",
			Quantity(declared(t.Fixed, t.Declared)), Quantity(declared(t.PerItem, t.Declared)))
	}
	fmt.Fprintf(&b, "    batch: {min: 1, max: %d}\n    threads: %d\n    minThreads: 1\n", t.Items, threads)
	return b.String()
}

// TrivialManifest renders a one-item task running command.
func TrivialManifest(name string, command ...string) string {
	return fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: %s\nspec:\n  command: [%s]\n  items: {count: 1}\n  resources:\n    fixed: {memory: 1Mi}\n    threads: 1\n",
		name, quoteList(command))
}

// DoneManifest renders a finished one-item task, status Done, for the idle
// case. specHash must be the hash the controller computes for the spec of
// TrivialManifest(name, "/bin/true") (v1alpha1.SpecHash of the parsed,
// defaulted spec), or the controller sees a new generation and runs it again.
func DoneManifest(name, specHash string, at time.Time) string {
	ts := at.UTC().Format(time.RFC3339)
	return TrivialManifest(name, "/bin/true") + fmt.Sprintf(
		"status:\n  phase: Done\n  observedGeneration: 1\n  specHash: %q\n  queueSeq: 1\n  progress: {itemsDone: 1, itemsTotal: 1, batchesDone: 1}\n  startTime: %q\n  completionTime: %q\n  conditions:\n  - {type: Complete, status: \"True\", reason: Completed, message: all items done, lastTransitionTime: %q}\n",
		specHash, ts, ts, ts)
}

func quoteList(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, ", ")
}

// Part is a hand-split piece of a task: items [Start, Start+Items).
type Part struct {
	// Task is the task split.
	Task Task
	// Index is the part's number.
	Index int
	// Start is the first item.
	Start int
	// Items is the number of items.
	Items int
}

// Split cuts t into n parts as evenly as possible, the way a user splits by
// hand (the first parts take the remainder).
func Split(t Task, n int) []Part {
	if n < 1 {
		n = 1
	}
	if n > t.Items {
		n = t.Items
	}
	parts := make([]Part, n)
	start := 0
	for i := range parts {
		k := t.Items / n
		if i < t.Items%n {
			k++
		}
		parts[i] = Part{Task: t, Index: i, Start: start, Items: k}
		start += k
	}
	return parts
}

// JobLine is the shell line a peer runs for part p: the wrapper sets the
// LARDON3D_* variables the controller would set, runs the step and logs the
// items done.
func JobLine(wrapper, synth string, p Part) string {
	args := append([]string{wrapper, fmt.Sprintf("%s-p%d", p.Task.Name, p.Index), fmt.Sprint(p.Start), fmt.Sprint(p.Items)}, SynthArgs(synth, p.Task)...)
	return strings.Join(args, " ")
}

// Slots is how many whole tasks a competent user runs at once: as many of
// the largest as fit the budget, at least one.
func Slots(maxWhole, budget int64) int {
	k := int(budget / maxWhole)
	if k < 1 {
		k = 1
	}
	return k
}

// declared is b times share, in whole KiB (exact when share is 1).
func declared(b int64, share float64) int64 {
	if share == 1 {
		return b
	}
	return int64(math.Round(float64(b)*share/1024)) * 1024
}
