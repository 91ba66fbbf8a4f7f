package queue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// scriptAdm answers as the test sets it: an Admit while its class has
// slots left (one taken per admission), otherwise a Wait whose figures
// are the class's free memory and the estimate's need. It keeps no other
// state, so two queues asking it in lockstep get the same answers however
// often each asks.
type scriptAdm struct {
	free  map[string]int64
	slots map[string]int
	asked int
}

func newScriptAdm() *scriptAdm {
	return &scriptAdm{free: map[string]int64{}, slots: map[string]int{}}
}

func (a *scriptAdm) Refresh() {}
func (a *scriptAdm) Reserve(e governor.Estimate) (governor.Decision, Reservation, bool) {
	a.asked++
	if a.slots[e.Class] > 0 {
		a.slots[e.Class]--
		c := governor.Contract{Batch: e.BatchMax, Threads: e.Threads}
		return governor.Decision{Verdict: governor.Admit, Reason: governor.ReasonFits, Batch: e.BatchMax, Threads: e.Threads}, fakeRes{1, c}, true
	}
	return governor.Decision{Verdict: governor.Wait, Reason: governor.ReasonInsufficientMemory, Budget: governor.BudgetMemory,
		Need: e.FixedMemory + e.PerItemMemory*e.BatchMin, Free: a.free[e.Class], Batch: e.BatchMin, Threads: e.Threads}, nil, false
}
func (a *scriptAdm) Release(Reservation) error { return nil }
func (a *scriptAdm) Changed() <-chan struct{}  { return nil }

// shiftLearner estimates a task as declared, its fixed memory raised by
// extra (the test moves it, as batches observed would) and by kills.
type shiftLearner struct{ extra int64 }

func (l *shiftLearner) Observe(*Task, Batch, BatchResult) {}
func (l *shiftLearner) Estimate(t *Task, kills Kills) governor.Estimate {
	e := t.Estimate
	e.FixedMemory += l.extra + int64(10*kills.Memory)
	return e
}

// lockstep is a queue driven synchronously (no Run, no workers): what it
// admits is recorded, and stays admitted until the test ends or requeues
// it.
type lockstep struct {
	q        *Queue
	adm      *scriptAdm
	learn    *shiftLearner
	admitted []*entry
}

func newLockstep(cfg Config) *lockstep {
	l := &lockstep{adm: newScriptAdm(), learn: &shiftLearner{}}
	l.q = New(cfg, l.adm, nil, nil, WithLearner(l.learn))
	l.q.spawn = func(e *entry) { l.admitted = append(l.admitted, e) }
	return l
}

// settle ends (done) or gives back (requeue) the i-th admitted entry.
func (l *lockstep) settle(i int, requeue bool) {
	e := l.admitted[i]
	l.admitted = slices.Delete(l.admitted, i, i+1)
	l.q.mu.Lock()
	defer l.q.mu.Unlock()
	if requeue {
		l.q.lockedRequeue(e)
		return
	}
	e.state, e.phase = stateTerminal, v1alpha1.PhaseDone
	e.hasRes, e.contract = false, nil
	l.q.mu.active--
	l.q.workers.Done()
}

// verdicts is every task's phase, reason and message, and whether it
// holds a contract, in queue order.
func (l *lockstep) verdicts() []string {
	var out []string
	for _, s := range l.q.Snapshot() {
		out = append(out, fmt.Sprintf("%s %s %s %q contract=%v", s.Name, s.Phase, s.Reason, s.Message, s.Contract != nil))
	}
	return out
}

// Two queues get the same random script of tasks added, replaced, paused,
// resumed and removed, budgets freed and taken, slots granted, estimates
// revised, admitted tasks ended or given back and passes offered at a
// sequence break, and scan after each
// step (one to three passes); one of them forgets its parked run before
// each pass (parkedWait),
// so that it walks every pending task as before runs were parked. After
// every scan both hold the same verdict for every task (phase, reason,
// message, contract), have admitted the same tasks in the same order, and
// the parking one looked at fewer entries.
func TestParkedWaitRunGivesTheVerdictsOfAFullPass(t *testing.T) {
	classes := []string{"a", "b", "c"}
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 0xfeed))
		// Even seeds are floods: runs of one question (one class, one
		// mode, few dependencies); odd ones mix them.
		flood := seed%2 == 0
		odds := func(flooded, mixed int) bool {
			if flood {
				return r.IntN(100) < flooded
			}
			return r.IntN(100) < mixed
		}
		class := func(r *rand.Rand) string {
			if odds(98, 50) {
				return "a"
			}
			return classes[r.IntN(len(classes))]
		}
		cfg := Config{}
		if seed%3 == 0 {
			cfg.MaxParallel = 4
		}
		parking, full := newLockstep(cfg), newLockstep(cfg)
		both := func(f func(l *lockstep)) { f(parking); f(full) }
		names := []string{}
		// The odds of each step, in percent: a new task, a new generation,
		// pause or resume, remove, free memory moved, a slot, estimates
		// revised, an admitted task ended or given back, a pass offered
		// at a sequence break (up to a task).
		weights := []int{30, 10, 10, 5, 10, 10, 5, 15, 5}
		if flood {
			weights = []int{25, 1, 2, 2, 20, 25, 5, 15, 5}
		}
		pick := func() int {
			n := r.IntN(100)
			for i, w := range weights {
				if n < w {
					return i
				}
				n -= w
			}
			return len(weights) - 1
		}
		for step := range 600 {
			op := pick()
			switch {
			case op == 0 || len(names) == 0: // a new task, often with the same question as others
				name := fmt.Sprintf("t%03d", len(names))
				names = append(names, name)
				task := Task{
					Name: name, Seq: int64(1 + r.IntN(40)), Generation: 1, ItemsTotal: 1,
					Estimate: governor.Estimate{Class: class(r), PerItemMemory: 10, BatchMin: 1, BatchMax: 1, Threads: 1, MinThreads: 1},
				}
				if odds(0, 50) {
					task.ItemsTotal = int64(2 + r.IntN(2))
				}
				if odds(0, 50) {
					task.Mode, task.Profile = v1alpha1.EstimateStrict, "p"
				}
				if odds(0, 10) {
					task.DependsOn = []string{names[r.IntN(len(names))]}
				}
				both(func(l *lockstep) {
					if err := l.q.Upsert(task); err != nil {
						t.Fatalf("seed %d step %d: upsert %s: %v", seed, step, name, err)
					}
				})
			case op == 1: // a new generation of a task
				name := names[r.IntN(len(names))]
				task := Task{
					Name: name, Seq: int64(1 + r.IntN(40)), Generation: int64(2 + step), ItemsTotal: 2,
					Estimate: governor.Estimate{Class: class(r), PerItemMemory: 10, BatchMin: 1, BatchMax: 2, Threads: 1, MinThreads: 1},
				}
				var errs [2]error
				i := 0
				both(func(l *lockstep) { errs[i] = l.q.Upsert(task); i++ })
				if (errs[0] == nil) != (errs[1] == nil) || (errs[0] != nil && !errors.Is(errs[0], ErrSpecPending)) {
					t.Fatalf("seed %d step %d: upsert %s: %v and %v", seed, step, name, errs[0], errs[1])
				}
			case op == 2:
				name, paused := names[r.IntN(len(names))], !odds(75, 50) // a flood's pauses are resumed
				both(func(l *lockstep) { _ = l.q.SetPaused(name, paused) })
			case op == 3:
				name := names[r.IntN(len(names))]
				both(func(l *lockstep) { _ = l.q.Remove(name) })
			case op == 4: // the memory free for a class moves: new Wait messages
				c, free := classes[r.IntN(len(classes))], int64(r.IntN(3))
				both(func(l *lockstep) { l.adm.free[c] = free })
			case op == 5:
				c := classes[r.IntN(len(classes))]
				both(func(l *lockstep) { l.adm.slots[c]++ })
			case op == 6:
				extra := int64(r.IntN(2))
				both(func(l *lockstep) { l.learn.extra = extra })
			case op == 7 && len(parking.admitted) > 0:
				i, requeue := r.IntN(len(parking.admitted)), r.IntN(2) == 0
				if parking.admitted[i].task.Name != full.admitted[i].task.Name {
					t.Fatalf("seed %d step %d: admitted %s in one queue, %s in the other", seed, step, parking.admitted[i].task.Name, full.admitted[i].task.Name)
				}
				both(func(l *lockstep) { l.settle(i, requeue) })
			case op == 8:
				name := names[r.IntN(len(names))]
				full.q.mu.Lock()
				full.q.mu.parkedWait = waitRun{}
				full.q.mu.Unlock()
				both(func(l *lockstep) {
					l.q.mu.Lock()
					defer l.q.mu.Unlock()
					if until := l.q.mu.tasks[name]; until != nil {
						l.q.lockedScan(until, false)
					}
				})
			}
			for range 1 + r.IntN(3) { // a change wakes a pass or several
				full.q.mu.Lock()
				full.q.mu.parkedWait = waitRun{}
				full.q.mu.Unlock()
				both(func(l *lockstep) { l.q.scanOnce() })
			}
			a, b := parking.verdicts(), full.verdicts()
			if !slices.Equal(a, b) {
				for i := range min(len(a), len(b)) {
					if a[i] != b[i] {
						t.Fatalf("seed %d step %d: with a parked run %s, after a full pass %s", seed, step, a[i], b[i])
					}
				}
				t.Fatalf("seed %d step %d: %d tasks and %d", seed, step, len(a), len(b))
			}
			if len(parking.admitted) != len(full.admitted) {
				t.Fatalf("seed %d step %d: %d admitted with a parked run, %d after full passes", seed, step, len(parking.admitted), len(full.admitted))
			}
		}
		pt, ft := parking.q.mu.tries, full.q.mu.tries
		t.Logf("seed %d (flood %v): %d tasks, entries looked at: %d with parked runs, %d in full passes", seed, flood, len(names), pt, ft)
		if flood && pt >= ft {
			t.Errorf("seed %d, a flood: parked runs looked at %d entries, full passes %d: nothing skipped", seed, pt, ft)
		}
	}
}

// sameQuestion is a lockstep queue of n tasks t000, t001... in that order,
// all asking the same question (class "same").
func sameQuestion(t *testing.T, n int) *lockstep {
	t.Helper()
	l := newLockstep(Config{})
	for i := range n {
		task := mkTask(fmt.Sprintf("t%03d", i), int64(i+1), 1, 1)
		task.Estimate.Class = "same"
		if err := l.q.Upsert(task); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// Five hundred tasks asking the same question, told to wait: once a pass
// has walked them, the passes that follow while nothing changed look at
// one entry each. A task paused in the run gets its new reason, then the
// Wait again once resumed; a new answer (more memory free) reaches every
// task; when a slot frees, the next task in FIFO order is admitted and the
// pass still looks at a couple of entries.
func TestWaitingPassesSkipTheParkedRun(t *testing.T) {
	const n = 500
	l := sameQuestion(t, n)
	tries := func() int { l.q.mu.Lock(); defer l.q.mu.Unlock(); return l.q.mu.tries }
	message := func(name string) string {
		for _, s := range l.q.Snapshot() {
			if s.Name == name {
				return string(s.Phase) + " " + s.Reason + " " + s.Message
			}
		}
		return ""
	}
	l.q.scanOnce() // a full pass: the run is parked
	before, asked := tries(), l.adm.asked
	for range 20 {
		l.q.scanOnce()
	}
	if got := tries() - before; got > 20 {
		t.Errorf("20 passes over %d waiting tasks looked at %d entries, want one each", n, got)
	}
	if got := l.adm.asked - asked; got != 20 {
		t.Errorf("20 passes asked the governor %d times, want 20", got)
	}

	// A change in the run: walked, and the new verdict given.
	if err := l.q.SetPaused("t400", true); err != nil {
		t.Fatal(err)
	}
	l.q.scanOnce()
	if got := message("t400"); got != "Pending "+v1alpha1.ReasonPaused+" paused before admission" {
		t.Errorf("t400 paused in a parked run: %s", got)
	}
	waiting := message("t399")
	if err := l.q.SetPaused("t400", false); err != nil {
		t.Fatal(err)
	}
	l.q.scanOnce()
	if got := message("t400"); got != waiting {
		t.Errorf("t400 resumed: %q, want the others' %q", got, waiting)
	}

	// A new answer: every task of the run gets it.
	l.adm.free["same"] = 5
	l.q.scanOnce()
	if got := message("t499"); got == waiting || got != message("t001") {
		t.Errorf("after more memory freed, the last task says %q (before %q, the second %q)", got, waiting, message("t001"))
	}

	// A slot: the head is admitted, the rest of the run left as it is.
	l.q.scanOnce()
	l.adm.slots["same"] = 1
	before = tries()
	l.q.scanOnce()
	if len(l.admitted) != 1 || l.admitted[0].task.Name != "t000" {
		t.Fatalf("admitted %d tasks, want t000 alone", len(l.admitted))
	}
	if got := tries() - before; got > 2 {
		t.Errorf("a pass admitting the head of a parked run looked at %d entries, want 2", got)
	}
	l.adm.slots["same"] = 1
	l.q.scanOnce()
	if len(l.admitted) != 2 || l.admitted[1].task.Name != "t001" {
		t.Errorf("the second admission went to %s, want t001 (FIFO)", l.admitted[len(l.admitted)-1].task.Name)
	}
}

// A pass offered at a sequence break, which walks the queue only up to
// the task at the break, may give part of a parked run another answer:
// the run is then not skipped, and the next whole pass walks it all,
// giving every task the governor's answer of that pass.
func TestAParkedRunPartlyAnsweredAnewIsWalkedAgain(t *testing.T) {
	l := sameQuestion(t, 20)
	l.q.scanOnce() // every task told to wait: parked
	l.adm.free["same"] = 1
	l.q.mu.Lock()
	l.q.lockedScan(l.q.mu.tasks["t010"], false) // t000..t009 told the new answer
	l.q.mu.Unlock()
	l.adm.free["same"] = 0
	l.q.scanOnce()
	want := ""
	for _, s := range l.q.Snapshot() {
		if want == "" {
			want = s.Message
		}
		if s.Message != want {
			t.Errorf("%s: %q, want the pass's answer %q", s.Name, s.Message, want)
		}
	}
}
