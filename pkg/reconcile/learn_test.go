package reconcile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/lardon3d/lardon3d-controller/internal/damagedbolt"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

type fakeMemory struct{ grant, free int64 }

func (f fakeMemory) Memory() (int64, int64) { return f.grant, f.free }

const mi = int64(1 << 20)

func TestProfileOf(t *testing.T) {
	for _, tc := range []struct {
		spec v1alpha1.TaskSpec
		want string
	}{
		{v1alpha1.TaskSpec{Class: "features", Command: []string{"/usr/bin/colmap", "feature_extractor"}}, "features/colmap"},
		{v1alpha1.TaskSpec{Command: []string{"lardon3d-synth"}}, "custom/lardon3d-synth"},
		{v1alpha1.TaskSpec{Command: []string{"colmap"}, Resources: v1alpha1.Resources{Profile: "colmap-features-640"}}, "colmap-features-640"},
		// spec.resources.profile wins over everything below.
		{v1alpha1.TaskSpec{Command: []string{"sh", "-c", "colmap x"}, Resources: v1alpha1.Resources{Profile: "mine"}}, "mine"},
		// A script file: named after it.
		{v1alpha1.TaskSpec{Command: []string{"python3", "train.py", "--epochs", "3"}}, "custom/train.py"},
		{v1alpha1.TaskSpec{Command: []string{"/usr/bin/python3", "-u", "/data/jobs/train.py"}}, "custom/train.py"},
		{v1alpha1.TaskSpec{Command: []string{"python3", "-m", "mypkg.worker"}}, "custom/mypkg.worker"},
		{v1alpha1.TaskSpec{Command: []string{"sh", "./run.sh", "a"}}, "custom/run.sh"},
		{v1alpha1.TaskSpec{Class: "mesh", Command: []string{"bash", "-e", "scripts/mesh.sh"}}, "mesh/mesh.sh"},
		{v1alpha1.TaskSpec{Command: []string{"env", "OMP_NUM_THREADS=2", "python3", "train.py"}}, "custom/train.py"},
		// An inline script: named after its first program.
		{v1alpha1.TaskSpec{Class: "features", Command: []string{"sh", "-c", "colmap feature_extractor --database_path db"}}, "features/colmap"},
		{v1alpha1.TaskSpec{Command: []string{"bash", "-ec", "set -u\n# extract\nX=1 exec colmap feature_extractor"}}, "custom/colmap"},
		{v1alpha1.TaskSpec{Command: []string{"sh", "-c", "cd work && if test -f x; then python3 ../train.py; fi"}}, "custom/train.py"},
		{v1alpha1.TaskSpec{Command: []string{"sh", "-c", `list=$(mktemp) && trap 'rm -f "$list"' EXIT
sed 's|.*/||' "$LARDON3D_ITEMS_FILE" > "$list"
colmap feature_extractor --image_list_path "$list"`}}, "custom/colmap"},
		{v1alpha1.TaskSpec{Command: []string{"sh", "-c", `xargs -d "\n" -a "$LARDON3D_ITEMS_FILE" gzip -kfv`}}, "custom/xargs"},
		{v1alpha1.TaskSpec{Command: []string{"busybox", "sh", "-c", "gzip -k x"}}, "custom/gzip"},
	} {
		if got := ProfileOf(&tc.spec); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.spec.Command, got, tc.want)
		}
	}
	// Editing a script keeps its profile.
	a := ProfileOf(&v1alpha1.TaskSpec{Command: []string{"sh", "-c", "colmap a"}})
	b := ProfileOf(&v1alpha1.TaskSpec{Command: []string{"sh", "-c", "colmap b --more"}})
	if a != b || a != "custom/colmap" {
		t.Errorf("an edited script changes profile: %q / %q", a, b)
	}
	// Nothing better than the hash: inline code, a program in a variable.
	for _, cmd := range [][]string{{"python3", "-c", "print(1)"}, {"sh", "-c", `"$PROG" --x`}, {"sh"}} {
		p := ProfileOf(&v1alpha1.TaskSpec{Command: cmd})
		base := filepath.Base(cmd[0])
		if !strings.HasPrefix(p, "custom/"+base+"-") || len(p) != len("custom/"+base+"-")+8 {
			t.Errorf("%q: %q, want custom/%s-HASH", cmd, p, base)
		}
	}
}

func newTestLearner(free int64) *learner {
	return &learner{
		book: history.NewBook(0, history.Params{}), gov: fakeMemory{grant: 4096 * mi, free: free},
		provisional: DefaultProvisionalFraction, now: time.Now,
	}
}

func learnTask(mode v1alpha1.EstimateMode, fixed, perItem int64) *queue.Task {
	return &queue.Task{Name: "t", Profile: "custom/synth", Mode: mode, ItemsTotal: 16,
		Estimate: governor.Estimate{FixedMemory: fixed, PerItemMemory: perItem, BatchMin: 1, BatchMax: 16, Threads: 1, MinThreads: 1}}
}

func finish(l *learner, t *queue.Task, items int64, peak, limit int64, killed bool) {
	res := queue.BatchResult{PeakMemoryBytes: peak, Started: time.Unix(0, 0), Ended: time.Unix(1, 0)}
	if killed {
		res.ExitCode, res.Reason = -1, v1alpha1.ReasonMemoryExceeded
	}
	l.Observe(t, queue.Batch{Size: items, Contract: governor.Contract{Threads: 1, MemoryBytes: limit}}, res)
}

// No estimate, no history: batch.min under a quarter of the capacity,
// clamped to what is free, never 0 B; then a slow start from what the
// first batch measured; then the fit.
func TestLearnerSlowStart(t *testing.T) {
	l := newTestLearner(4096 * mi)
	tk := learnTask(v1alpha1.EstimateLearned, 0, 0)
	e := l.Estimate(tk, queue.Kills{})
	if e.FixedMemory != 1024*mi || e.PerItemMemory != 0 || e.BatchMax != 1 {
		t.Fatalf("provisional: %+v, want 1GiB at batch.min", e)
	}
	if e := newTestLearner(300*mi).Estimate(tk, queue.Kills{}); e.FixedMemory != 300*mi {
		t.Fatalf("provisional with 300MiB free: %d MiB, want clamped to 300", e.FixedMemory/mi)
	}
	if e := newTestLearner(0).Estimate(tk, queue.Kills{}); e.FixedMemory != 64*mi {
		t.Fatalf("provisional with nothing free: %d MiB, want the 64MiB floor (never 0 B)", e.FixedMemory/mi)
	}
	// True costs 64Mi + 16Mi per item.
	peak := func(n int64) int64 { return 64*mi + 16*mi*n }
	finish(l, tk, 1, peak(1), 1024*mi, false)
	e = l.Estimate(tk, queue.Kills{})
	if e.BatchMax != 2 || e.FixedMemory+2*e.PerItemMemory < 2*peak(1) {
		t.Fatalf("after one batch: %+v, want at most 2 items and no less than twice the first peak", e)
	}
	finish(l, tk, 2, peak(2), 200*mi, false)
	finish(l, tk, 4, peak(4), 200*mi, false)
	e = l.Estimate(tk, queue.Kills{})
	if e.BatchMax != 16 {
		t.Fatalf("firm: batch max %d, want 16 (4 × 4, capped by the task)", e.BatchMax)
	}
	for _, n := range []int64{4, 8, 16} {
		need := e.FixedMemory + e.PerItemMemory*n
		if need < peak(n) || float64(need) > 1.25*float64(peak(n)) {
			t.Errorf("firm: need(%d) %d MiB, true %d MiB: want within +25%%", n, need/mi, peak(n)/mi)
		}
	}
}

// A declared task keeps its costs until killed; then it gets more than the
// kill had. A learned task with declared costs switches to the model once
// it is firm.
func TestLearnerDeclared(t *testing.T) {
	l := newTestLearner(4096 * mi)
	tk := learnTask(v1alpha1.EstimateDeclared, 50*mi, 10*mi)
	if e := costsOf(l.Estimate(tk, queue.Kills{})); e != tk.Estimate {
		t.Fatalf("declared, no kill: %+v changed", e)
	}
	finish(l, tk, 16, 240*mi, 210*mi, true)
	e := l.Estimate(tk, queue.Kills{Memory: 1})
	if need := e.FixedMemory + e.PerItemMemory*min(16, e.BatchMax); need < (history.Params{}).Bump(240*mi) {
		t.Fatalf("after a kill at 240MiB: %d MiB for a batch of %d", need/mi, e.BatchMax)
	}
	// The kill proved the declaration too low for every task stating it,
	// before any batch of the profile succeeded: the next one is not
	// killed in turn (packing D's second pair of tasks was). A task
	// declared above what the kill had keeps its declaration.
	same := learnTask(v1alpha1.EstimateDeclared, 50*mi, 10*mi)
	same.Name = "same"
	if e := l.Estimate(same, queue.Kills{}); e.FixedMemory+e.PerItemMemory*min(16, e.BatchMax) < (history.Params{}).Bump(240*mi) {
		t.Fatalf("a second task stating the costs a kill refuted: %+v, not above the kill", e)
	}
	above := learnTask(v1alpha1.EstimateDeclared, 100*mi, 10*mi) // 260MiB at 16
	if e := costsOf(l.Estimate(above, queue.Kills{})); e != above.Estimate {
		t.Fatalf("a declaration above the kill was changed: %+v", e)
	}

	// Another task of the profile, declared as low, is not killed in turn
	// once the profile's batches proved the declaration too low; one
	// declared above the measured need keeps its declaration.
	for _, n := range []int64{2, 5, 9} {
		finish(l, tk, n, 64*mi+16*mi*n, 0, false)
	}
	other := learnTask(v1alpha1.EstimateDeclared, 50*mi, 10*mi)
	other.Name = "other"
	if e := l.Estimate(other, queue.Kills{}); e.FixedMemory+e.PerItemMemory*min(16, e.BatchMax) < 64*mi+16*mi*min(16, e.BatchMax) {
		t.Fatalf("a second task declared too low, profile firm: %+v, below the measured need", e)
	}
	generous := learnTask(v1alpha1.EstimateDeclared, 500*mi, 30*mi)
	if e := costsOf(l.Estimate(generous, queue.Kills{})); e != generous.Estimate {
		t.Fatalf("a generous declaration was changed: %+v", e)
	}

	l = newTestLearner(4096 * mi)
	tk = learnTask(v1alpha1.EstimateLearned, 2*(64*mi), 2*(16*mi)) // declared twice the truth
	if e := costsOf(l.Estimate(tk, queue.Kills{})); e != tk.Estimate {
		t.Fatalf("learned with declared costs, no history: %+v, want the declaration", e)
	}
	for _, n := range []int64{2, 5, 9, 16} {
		finish(l, tk, n, 64*mi+16*mi*n, 0, false)
	}
	e = l.Estimate(tk, queue.Kills{})
	if need := e.FixedMemory + 16*e.PerItemMemory; float64(need) > 1.25*float64(64*mi+16*16*mi) {
		t.Fatalf("learned, firm: %d MiB for 16 items, want the model's (about %d MiB), not the declaration", need/mi, (64*mi+16*16*mi)/mi)
	}
}

// A declared task keeps its declaration while its batches need what it
// states, however the profile's model, pooled over other tasks and with
// its margins, prices it (packing B: ten tasks of one binary, each
// declared exactly, got up to 3.7 GiB for one item from the fit). Batches
// that needed more than their declaration by more than the margin raise
// it for every task stating it, and again when the raise proves short;
// a task stating other costs keeps them.
func TestLearnerDeclaredStandsUnlessItsBatchesNeededMore(t *testing.T) {
	l := newTestLearner(64 << 30)
	// Ten tasks of one profile, from 300 MiB + 10 MiB per item to
	// 1.65 GiB + 60 MiB, each declared exactly; the runtime adds 9 MiB.
	var tasks []*queue.Task
	for i := range int64(10) {
		tk := learnTask(v1alpha1.EstimateDeclared, 300*mi+150*mi*i, 10*mi+5*mi*i)
		tk.Name, tk.ItemsTotal, tk.Estimate.BatchMax = fmt.Sprintf("b-%02d", i), 64, 64
		tasks = append(tasks, tk)
		for _, n := range []int64{1 + i, 32, 64 - 3*i} {
			limit := tk.Estimate.FixedMemory + tk.Estimate.PerItemMemory*n
			finish(l, tk, n, limit+9*mi, limit, false)
		}
	}
	if m := l.book.Model("custom/synth"); m.State != history.StateFirm {
		t.Fatalf("profile %v after 30 batches, want firm", m.State)
	}
	for _, tk := range tasks {
		if e := costsOf(l.Estimate(tk, queue.Kills{})); e != tk.Estimate {
			t.Errorf("%s, declared exactly: %+v, want its declaration %+v", tk.Name, e, tk.Estimate)
		}
	}

	// Declared 100 MiB + 10 MiB per item; its batches needed 8 % more.
	l = newTestLearner(64 << 30)
	low := learnTask(v1alpha1.EstimateDeclared, 100*mi, 10*mi)
	declared := func(n int64) int64 { return 100*mi + 10*mi*n }
	finish(l, low, 8, declared(8)*108/100, declared(8), false)
	e := l.Estimate(low, queue.Kills{})
	if need := e.FixedMemory + e.PerItemMemory*8; need < declared(8)*108/100 {
		t.Fatalf("one batch 8 %% above the declaration: %d MiB for 8 items, want at least the %d MiB it needed", need/mi, declared(8)*108/100/mi)
	}
	same := learnTask(v1alpha1.EstimateDeclared, 100*mi, 10*mi)
	same.Name = "same"
	if got := costsOf(l.Estimate(same, queue.Kills{})); got != costsOf(e) {
		t.Fatalf("a task stating the same costs: %+v, want the raise %+v", got, costsOf(e))
	}
	apart := learnTask(v1alpha1.EstimateDeclared, 90*mi, 9*mi)
	apart.Name = "apart"
	if got := costsOf(l.Estimate(apart, queue.Kills{})); got != apart.Estimate {
		t.Fatalf("a task stating other costs: %+v, want them", got)
	}
	// The batch run under the raise needed 7 % more than the raise:
	// raised again, by what it needed over the declaration.
	raisedNeed := e.FixedMemory + e.PerItemMemory*16
	finish(l, low, 16, raisedNeed*107/100, raisedNeed, false)
	e = l.Estimate(low, queue.Kills{})
	if need := e.FixedMemory + e.PerItemMemory*16; need < raisedNeed*107/100 {
		t.Fatalf("a batch 7 %% above the raise: %d MiB for 16 items, want at least the %d MiB it needed", need/mi, raisedNeed*107/100/mi)
	}

	// The raise outlives the batch that proved it: once the book has
	// dropped it, the batches run under the raise, within it, still
	// needed more than the declaration.
	l = newTestLearner(64 << 30)
	l.book = history.NewBook(4, history.Params{})
	finish(l, low, 8, declared(8)*109/100, declared(8), false)
	e = l.Estimate(low, queue.Kills{})
	for range 4 {
		finish(l, low, 8, declared(8)*109/100, e.FixedMemory+e.PerItemMemory*8, false)
	}
	if got := costsOf(l.Estimate(low, queue.Kills{})); got.FixedMemory+got.PerItemMemory*8 < declared(8)*109/100 {
		t.Fatalf("after the proving batch left the book: %d MiB for 8 items, its batches need %d MiB", (got.FixedMemory+got.PerItemMemory*8)/mi, declared(8)*109/100/mi)
	}

	// Raised, then the model of the profile (other tasks, generous, a
	// steeper cost per item and none fixed) gives the largest batch more
	// than the raise: no batch size gets less than either gives it.
	l = newTestLearner(64 << 30)
	big := learnTask(v1alpha1.EstimateDeclared, 1000*mi, 1*mi)
	big.Name, big.ItemsTotal, big.Estimate.BatchMax = "big", 64, 64
	finish(l, big, 4, 1100*mi, 1004*mi, false)
	for i := range 40 {
		o := learnTask(v1alpha1.EstimateDeclared, 8000*mi, 0)
		o.Name = fmt.Sprintf("o%d", i)
		finish(l, o, int64(8+i), 65*mi*int64(8+i), 8000*mi, false)
	}
	big.ItemsDone = 60
	e = l.Estimate(big, queue.Kills{})
	for _, n := range []int64{1, 4, 64} {
		need := e.FixedMemory + e.PerItemMemory*n
		if need < (1000*mi+1*mi*n)*109/100 || need < 65*mi*n {
			t.Errorf("raised, the model steeper: %d MiB for %d items, below the raise or the model", need/mi, n)
		}
	}
}

// A batch on a unified GPU has the GPU costs in its memory reservation:
// a need within memory's and the GPU's declared costs proves nothing.
func TestLearnerUnifiedGPUDeclaration(t *testing.T) {
	l := newTestLearner(64 << 30)
	tk := learnTask(v1alpha1.EstimateDeclared, 100*mi, 10*mi)
	tk.Estimate.FixedGPUMemory, tk.Estimate.PerItemGPUMemory, tk.Estimate.GPUSlots = 500*mi, 50*mi, 1
	memory := int64(100*mi + 10*mi*8 + 500*mi + 50*mi*8)
	for range 3 {
		l.Observe(tk, queue.Batch{Size: 8, Contract: governor.Contract{Threads: 1, MemoryBytes: memory, GPUSlots: 1}},
			queue.BatchResult{PeakMemoryBytes: memory * 98 / 100, Started: time.Unix(0, 0), Ended: time.Unix(1, 0)})
	}
	if e := costsOf(l.Estimate(tk, queue.Kills{})); e != tk.Estimate {
		t.Fatalf("unified GPU, batches within memory and GPU costs declared: %+v changed", e)
	}
}

// The queue asks the learner at every admission of every task not in
// strict mode: the declared path must stay cheap.
func BenchmarkLearnerEstimateDeclared(b *testing.B) {
	l := newTestLearner(4096 * mi)
	tk := learnTask(v1alpha1.EstimateDeclared, 50*mi, 10*mi)
	for _, n := range []int64{2, 5, 9, 16} {
		finish(l, tk, n, 64*mi+16*mi*n, 0, false)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = l.Estimate(tk, queue.Kills{})
	}
}

func TestResourcesBlockRounding(t *testing.T) {
	got := ResourcesBlock(history.Costs{FixedBytes: 300*mi + 1, PerItemBytes: 13*mi + mi/10, PerThreadBytes: 0})
	want := "resources: {fixed: {memory: 301Mi}, perItem: {memory: 13.25Mi}, perThread: {memory: 0}}"
	if got != want {
		t.Fatalf("%s\nwant %s", got, want)
	}
}

// TestSuggestedQuantityRoundsUpToAPersonsUnit: a suggestion is written in
// the largest unit that fits (30Mi, never 30188Ki), parses back to at
// least what was measured, and is at most a quarter of its unit above it.
func TestSuggestedQuantityRoundsUpToAPersonsUnit(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		want  string
	}{
		{0, "0"}, {-5, "0"}, {100, "100"},
		{1 << 10, "1Ki"}, {1<<10 + 1, "1.25Ki"}, {300 << 10, "300Ki"},
		{30188 << 10, "30Mi"}, {29 * mi, "29Mi"}, {mi + 1, "1.25Mi"}, {3 * mi / 2, "1.5Mi"},
		{15*mi + mi/2 + 1, "15.75Mi"}, {16*mi + 1, "17Mi"},
		{1<<30 + 100*mi, "1.25Gi"}, {20<<30 + 1, "21Gi"},
	} {
		got := SuggestedQuantity(tc.bytes)
		if got != tc.want {
			t.Errorf("SuggestedQuantity(%d) = %s, want %s", tc.bytes, got, tc.want)
			continue
		}
		q, err := resource.ParseQuantity(got)
		if err != nil {
			t.Errorf("%s does not parse: %v", got, err)
			continue
		}
		if tc.bytes > 0 && q.Value() < tc.bytes {
			t.Errorf("%s is %d bytes, below the %d measured", got, q.Value(), tc.bytes)
		}
	}
}

// --batch-policy efficient (the default) caps the batch at the largest
// within 5 % of the profile's least time per item; largest does not.
// Batches cost 2 + 0.2n + 0.005n² s: least per item at 20 (0.4 s), 31
// items cost 0.419 s each, 32 items 0.4225 s; the governor then evens 64
// items out as three batches of 22, 21 and 21.
func TestLearnerBatchPolicy(t *testing.T) {
	for _, efficient := range []bool{false, true} {
		l := newTestLearner(4096 * mi)
		l.efficient = efficient
		tk := learnTask(v1alpha1.EstimateLearned, 0, 0)
		tk.Estimate.BatchMax, tk.ItemsTotal = 64, 64
		for i, n := range []int64{4, 8, 16, 24, 32, 48, 64} {
			secs := 2 + 0.2*float64(n) + 0.005*float64(n*n)
			l.Observe(tk, queue.Batch{Size: n, Contract: governor.Contract{Threads: 1}}, queue.BatchResult{
				PeakMemoryBytes: (300 + 60*n) * mi, Started: time.Unix(int64(i)*100, 0),
				Ended: time.Unix(int64(i)*100, 0).Add(time.Duration(secs * float64(time.Second)))})
		}
		e := l.Estimate(tk, queue.Kills{})
		if want := map[bool]int64{false: 64, true: 31}[efficient]; e.BatchMax != want {
			t.Errorf("efficient %v: batch max %d, want %d", efficient, e.BatchMax, want)
		}
	}
}

// A profile whose memory follows its files' size (an image decoder: 64 MiB
// + 2 bytes per input byte) learns it from batches of tasks with small and
// large files, and then prices each task's items by its own files: the
// task of 30 MiB images gets more per item than the one of 2 MiB images,
// and each estimate covers its real batches.
func TestLearnerPricesItemsByTheirInput(t *testing.T) {
	l := newTestLearner(4096 * mi)
	need := func(items int64, perItem float64) int64 { return 64*mi + int64(2*perItem*float64(items)) }
	sizes := []float64{2 * float64(mi), 30 * float64(mi), 8 * float64(mi), 16 * float64(mi)}
	for i := range 12 {
		per := sizes[i%len(sizes)]
		tk := learnTask(v1alpha1.EstimateLearned, 0, 0)
		tk.InputBytesPerItem = per
		items := int64(1 + i%5)
		res := queue.BatchResult{PeakMemoryBytes: need(items, per), InputBytes: int64(per * float64(items)), Started: time.Unix(0, 0), Ended: time.Unix(1, 0)}
		l.Observe(tk, queue.Batch{Size: items, Contract: governor.Contract{Threads: 1, MemoryBytes: 2048 * mi}}, res)
	}
	if m := l.book.Model("custom/synth"); m.PerInputByte < 1.9 || m.PerInputByte > 2.1 {
		t.Fatalf("per input byte %.2f, want 2 (model %+v)", m.PerInputByte, m)
	}
	small, large := learnTask(v1alpha1.EstimateLearned, 0, 0), learnTask(v1alpha1.EstimateLearned, 0, 0)
	small.InputBytesPerItem, large.InputBytesPerItem = 2*float64(mi), 30*float64(mi)
	es, el := l.Estimate(small, queue.Kills{}), l.Estimate(large, queue.Kills{})
	if es.PerItemMemory >= el.PerItemMemory {
		t.Fatalf("per item: 2 MiB files %d MiB, 30 MiB files %d MiB", es.PerItemMemory/mi, el.PerItemMemory/mi)
	}
	for _, c := range []struct {
		e   governor.Estimate
		per float64
	}{{es, 2 * float64(mi)}, {el, 30 * float64(mi)}} {
		for _, n := range []int64{1, 4, 8} {
			if got, want := c.e.FixedMemory+c.e.PerItemMemory*n, need(n, c.per); got < want || float64(got) > 1.3*float64(want) {
				t.Errorf("%d items of %.0f MiB: estimate %d MiB, real %d MiB", n, c.per/float64(mi), got/mi, want/mi)
			}
		}
	}
}

// A history store bbolt cannot read (intact meta pages, scribbled data
// pages: it panics on them) is moved aside and a new one started: the
// controller starts and learns on, nothing is deleted.
func TestADamagedHistoryIsMovedAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), history.FileName)
	damagedbolt.Write(t, path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	store := openHistory(path, history.NewBook(0, history.Params{}), zerolog.Nop())
	if store == nil {
		t.Fatal("no store after a damaged one: learning in memory only")
	}
	defer store.Close()
	if err := store.Append(history.Entry{Profile: "p", Record: history.Record{Time: time.Now(), Items: 1}}); err != nil {
		t.Fatalf("the new store: %v", err)
	}
	aside, _ := filepath.Glob(path + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("the damaged store was not moved aside: %v", aside)
	}
	if got, err := os.ReadFile(aside[0]); err != nil || len(got) != len(data) {
		t.Errorf("the damaged store moved aside is not whole: %d bytes of %d, %v", len(got), len(data), err)
	}
}

// costsOf is e without the learned duration Estimate adds (BatchTime,
// ItemTime): what the declaration holds.
func costsOf(e governor.Estimate) governor.Estimate {
	e.BatchTime, e.ItemTime = 0, 0
	return e
}

// finishGPU records a batch with a GPU memory contract of gpuLimit: its
// memory fine, its GPU peak gpuPeak (killed: stopped for GPU memory).
func finishGPU(l *learner, t *queue.Task, items, gpuPeak, gpuLimit int64, killed bool) {
	res := queue.BatchResult{PeakMemoryBytes: 32 * mi, PeakGPUMemoryBytes: gpuPeak, GPUMemoryMeasured: true,
		Started: time.Unix(0, 0), Ended: time.Unix(1, 0)}
	if killed {
		res.ExitCode, res.Reason = -1, v1alpha1.ReasonGPUMemoryExceeded
	}
	l.Observe(t, queue.Batch{Size: items, Contract: governor.Contract{Threads: 1, MemoryBytes: 64 * mi, GPUMemoryBytes: gpuLimit, GPUID: "nvidia:0"}}, res)
}

// GPU memory is learned beside memory: a batch killed for GPU memory is
// retried with more GPU memory than the kill measured, its memory costs
// untouched; once the profile's batches are firm, a learning task takes
// the fitted GPU costs, a declared one only when its own batches needed
// more than it (then the model's, when they give more); a batch whose GPU
// memory no reading measured teaches nothing.
func TestLearnerGPUMemory(t *testing.T) {
	l := newTestLearner(4096 * mi)
	tk := learnTask(v1alpha1.EstimateDeclared, 50*mi, 10*mi)
	tk.Estimate.FixedGPUMemory, tk.Estimate.PerItemGPUMemory, tk.Estimate.GPUSlots = 512*mi, 64*mi, 1
	if e := costsOf(l.Estimate(tk, queue.Kills{})); e != tk.Estimate {
		t.Fatalf("declared, no kill: %+v changed", e)
	}
	// One batch of one size measured, within the declaration: the
	// declaration stands whole (batch.min included).
	once := newTestLearner(4096 * mi)
	finishGPU(once, tk, 16, 1024*mi, 1536*mi, false)
	if e := costsOf(once.Estimate(tk, queue.Kills{})); e != tk.Estimate {
		t.Fatalf("declared, one GPU batch measured: %+v changed", e)
	}
	// Declared 512Mi + 64Mi × 16 = 1.5Gi; the batch used 2Gi.
	finishGPU(l, tk, 16, 2048*mi, 1536*mi, true)
	e := l.Estimate(tk, queue.Kills{GPUMemory: 1})
	if need := e.FixedGPUMemory + e.PerItemGPUMemory*min(16, e.BatchMax); need < (history.Params{}).Bump(2048*mi) {
		t.Fatalf("after a GPU memory kill at 2GiB: %d MiB for a batch of %d, want at least the bumped 2GiB", need/mi, e.BatchMax)
	}
	// Another task stating the same GPU costs is not killed in turn.
	same := learnTask(v1alpha1.EstimateDeclared, 50*mi, 10*mi)
	same.Name = "same"
	same.Estimate.FixedGPUMemory, same.Estimate.PerItemGPUMemory, same.Estimate.GPUSlots = 512*mi, 64*mi, 1
	if e := l.Estimate(same, queue.Kills{}); e.FixedGPUMemory+e.PerItemGPUMemory*min(16, e.BatchMax) < (history.Params{}).Bump(2048*mi) {
		t.Fatalf("a second task stating the GPU costs a kill refuted: %+v, not above the kill", e)
	}
	if e.FixedMemory != tk.Estimate.FixedMemory || e.PerItemMemory != tk.Estimate.PerItemMemory {
		t.Errorf("a GPU memory kill changed the memory costs: %+v", e)
	}

	// True GPU costs 1Gi + 64Mi per item, learned from batches of 2, 5, 9
	// and 16 items; a reading that never succeeded is left out.
	l = newTestLearner(4096 * mi)
	lt := learnTask(v1alpha1.EstimateLearned, 50*mi, 10*mi)
	lt.Estimate.FixedGPUMemory, lt.Estimate.PerItemGPUMemory, lt.Estimate.GPUSlots = 4096*mi, 256*mi, 1
	gpu := func(n int64) int64 { return 1024*mi + 64*mi*n }
	for _, n := range []int64{2, 5, 9, 16} {
		finishGPU(l, lt, n, gpu(n), 8192*mi, false)
	}
	l.Observe(lt, queue.Batch{Size: 3, Contract: governor.Contract{Threads: 1, MemoryBytes: 64 * mi, GPUMemoryBytes: 8192 * mi}},
		queue.BatchResult{PeakMemoryBytes: 32 * mi, Started: time.Unix(0, 0), Ended: time.Unix(1, 0)})
	if m := l.book.GPUModel(lt.Profile); m.Samples != 4 {
		t.Fatalf("GPU model of %d samples, want 4 (the unmeasured batch left out)", m.Samples)
	}
	e = l.Estimate(lt, queue.Kills{})
	for _, n := range []int64{4, 16} {
		need := e.FixedGPUMemory + e.PerItemGPUMemory*n
		if need < gpu(n) || float64(need) > 1.25*float64(gpu(n)) {
			t.Errorf("learned GPU need(%d) %d MiB, true %d MiB: want within +25%%", n, need/mi, gpu(n)/mi)
		}
	}
	generous := learnTask(v1alpha1.EstimateDeclared, 50*mi, 10*mi)
	generous.Estimate.FixedGPUMemory, generous.Estimate.PerItemGPUMemory, generous.Estimate.GPUSlots = 4096*mi, 256*mi, 1
	if e := costsOf(l.Estimate(generous, queue.Kills{})); e != generous.Estimate {
		t.Errorf("a generous GPU declaration was changed: %+v", e)
	}
	// A declaration below what the other task's batches measured, but
	// that no batch ran under, stands; once a batch reserved under it
	// needed more than it, it is raised: the model's costs, which give
	// more than the raise.
	low := learnTask(v1alpha1.EstimateDeclared, 50*mi, 10*mi)
	low.Name = "low"
	low.Estimate.FixedGPUMemory, low.Estimate.GPUSlots = 256*mi, 1
	if e := costsOf(l.Estimate(low, queue.Kills{})); e != low.Estimate {
		t.Errorf("a GPU declaration no batch ran under was changed: %+v", e)
	}
	finishGPU(l, low, 4, 276*mi, 256*mi, false)
	if e := l.Estimate(low, queue.Kills{}); e.FixedGPUMemory+e.PerItemGPUMemory*16 < gpu(16) {
		t.Errorf("a GPU declaration its batch needed 8 %% more than was not raised to the model's: %+v", e)
	}
	// Raised alone (the model not firm yet): at least what its batch needed.
	alone := newTestLearner(4096 * mi)
	finishGPU(alone, low, 4, 276*mi, 256*mi, false)
	if e := alone.Estimate(low, queue.Kills{}); e.FixedGPUMemory+e.PerItemGPUMemory*4 < 276*mi {
		t.Errorf("one batch 8 %% over its GPU declaration: %+v, want at least the 276 MiB it needed", e)
	}
}
