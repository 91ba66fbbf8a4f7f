package queue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/share"
)

// sim drives a queue step by step on a fake clock: admitted tasks are not
// run, the test ends them (finish), as a worker whose one batch ended Done.
type sim struct {
	t   testing.TB
	q   *Queue
	adm *fakeAdm
	clk *clocktesting.FakeClock
	// admitted in order, with the time each was.
	admitted []string
	at       map[string]time.Time
	seq      int64
}

func newSim(t testing.TB, cfg Config, budget int64) *sim {
	s := &sim{t: t, adm: newFakeAdm(budget), clk: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)), at: map[string]time.Time{}}
	s.q = New(cfg, s.adm, nil, nil, WithClock(s.clk))
	s.q.spawn = func(e *entry) {
		s.admitted = append(s.admitted, e.task.Name)
		s.at[e.task.Name] = s.clk.Now()
	}
	return s
}

// add submits a one-item task of cost units to account acct.
func (s *sim) add(name, acct string, prio, cost int64) {
	s.seq++
	tk := mkTask(name, s.seq, 1, 1)
	tk.Estimate.Class = "c"
	tk.Estimate.PerItemMemory = cost
	tk.Account, tk.Priority = acct, prio
	if err := s.q.Upsert(tk); err != nil {
		s.t.Fatal(err)
	}
}

// finish ends an admitted task as its worker would after its batch.
func (s *sim) finish(name string) governor.Contract {
	q := s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	e := q.mu.tasks[name]
	if e == nil || e.state != stateActive {
		s.t.Fatalf("finish %s: not active", name)
	}
	c := *e.contract
	q.lockedRelease(e)
	q.mu.active--
	q.mu.ledger.Ended(e.task.Account, q.clock.Now())
	e.task.ItemsDone = e.task.ItemsTotal
	q.lockedEnd(e, v1alpha1.PhaseDone, v1alpha1.ReasonCompleted, "done")
	return c
}

// checkFIFOWithinAccounts: a task admitted by a pass left pending only
// tasks of its account and priority ahead of it that the governor told to
// wait (the seed's rule within a class: FIFO, only a Wait bypassed).
func (s *sim) checkFIFOWithinAccounts(admitted []string) {
	s.t.Helper()
	q := s.q
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, name := range admitted {
		a := q.mu.tasks[name]
		for _, e := range q.mu.tasks {
			if e.state == statePending && classOf(e) == classOf(a) && less(e, a) && e.reason != string(governor.ReasonInsufficientMemory) {
				s.t.Errorf("%s admitted while %s, ahead of it in its class, waits for %s (%s)", name, e.task.Name, e.reason, e.message)
			}
		}
	}
}

func (s *sim) state(name string) TaskState {
	for _, st := range s.q.Snapshot() {
		if st.Name == name {
			return st
		}
	}
	s.t.Fatalf("no task %s", name)
	return TaskState{}
}

// Three accounts with shares 1:1:2 flood a machine of 12 units with
// tasks of random sizes (1-4 units) and lengths (10 s - 5 min): while the
// three have work, each one's reserved memory·time stays within 10 % of
// its share, over every seed.
func TestFairShareFollowsSharesUnderRandomFloods(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 58))
			shares := map[string]float64{"a": 1, "b": 1, "c": 2}
			s := newSim(t, Config{Fair: share.Config{HalfLife: time.Hour, Shares: shares}}, 12)
			type run struct {
				acct string
				end  time.Time
				cost int64
			}
			running := map[string]run{}
			backlog := map[string]int{}
			used := map[string]float64{}
			hourly := map[int]map[string]float64{} // by hour from the start
			n := 0
			flood := func(acct string) {
				for range 1 + rng.IntN(20) {
					n++
					s.add(fmt.Sprintf("%s-%04d", acct, n), acct, 0, 1+rng.Int64N(4))
					backlog[acct]++
				}
			}
			lengths := map[string]time.Duration{}
			start := s.clk.Now()
			step := 5 * time.Second
			for s.clk.Now().Sub(start) < 8*time.Hour {
				for _, acct := range []string{"a", "b", "c"} {
					if backlog[acct] < 5 && rng.IntN(4) == 0 || backlog[acct] == 0 {
						flood(acct) // every account keeps work: all three compete
					}
				}
				before := len(s.admitted)
				s.q.scanOnce()
				s.checkFIFOWithinAccounts(s.admitted[before:])
				for _, name := range s.admitted[before:] {
					acct := name[:1]
					backlog[acct]--
					d, ok := lengths[name]
					if !ok {
						d = time.Duration(10+rng.IntN(290)) * time.Second
					}
					st := s.state(name)
					running[name] = run{acct: acct, end: s.clk.Now().Add(d), cost: st.Contract.MemoryBytes}
				}
				s.clk.Step(step)
				now := s.clk.Now()
				names := make([]string, 0, len(running))
				for name := range running {
					names = append(names, name)
				}
				slices.Sort(names)
				for _, name := range names {
					r := running[name]
					used[r.acct] += float64(r.cost) * step.Seconds()
					hour := int(now.Sub(start) / time.Hour)
					if hourly[hour] == nil {
						hourly[hour] = map[string]float64{}
					}
					hourly[hour][r.acct] += float64(r.cost) * step.Seconds()
					if !now.Before(r.end) {
						s.finish(name)
						delete(running, name)
					}
				}
			}
			var total float64
			for _, u := range used {
				total += u
			}
			for acct, sh := range shares {
				got, want := used[acct]/total, sh/4
				t.Logf("account %s: %.3f of the reserved memory·time, share %.3f", acct, got, want)
				if math.Abs(got-want) > 0.1*want {
					t.Errorf("account %s used %.3f of the reserved memory·time, want %.3f ±10%%", acct, got, want)
				}
			}
			// Over time too: each hour after the first (the first settles
			// who is ahead), every account within 10 % of its share.
			for hour := 1; hour < 8; hour++ {
				var sum float64
				for _, u := range hourly[hour] {
					sum += u
				}
				for acct, sh := range shares {
					if got, want := hourly[hour][acct]/sum, sh/4; math.Abs(got-want) > 0.1*want {
						t.Errorf("hour %d: account %s used %.3f, want %.3f ±10%%", hour, acct, got, want)
					}
				}
			}
			if s.adm.overBudgetSeen {
				t.Error("over budget")
			}
		})
	}
}

// A low-priority task under a constant stream of higher-priority ones
// still runs: it ages toward the highest priority pending and is asked
// first once it waited PriorityMaxAge (and its account, ahead in FIFO
// and fair share, holds the others while it waits for room).
func TestLowPriorityDoesNotStarveUnderAStreamOfHigherOnes(t *testing.T) {
	for _, accts := range [][2]string{{"a", "a"}, {"a", "b"}} {
		t.Run(accts[0]+accts[1], func(t *testing.T) {
			s := newSim(t, Config{PriorityMaxAge: 10 * time.Minute}, 4)
			s.add("low", accts[0], -100, 4) // needs the whole machine
			n := 0
			more := func() {
				n++
				s.add(fmt.Sprintf("high-%03d", n), accts[1], 1000, 1)
			}
			for range 6 {
				more()
			}
			start := s.clk.Now()
			var runningHigh []string
			for s.clk.Now().Sub(start) < time.Hour {
				before := len(s.admitted)
				s.q.scanOnce()
				for _, name := range s.admitted[before:] {
					if name == "low" {
						if waited := s.clk.Now().Sub(start); waited > 12*time.Minute {
							t.Errorf("low ran after %s, want within about PriorityMaxAge (10m)", waited)
						}
						return
					}
					runningHigh = append(runningHigh, name)
				}
				s.clk.Step(30 * time.Second)
				// The stream: the oldest high task ends, a new one comes,
				// there are always more high tasks than the machine holds.
				if len(runningHigh) > 0 {
					s.finish(runningHigh[0])
					runningHigh = runningHigh[1:]
				}
				more()
			}
			t.Fatalf("low never ran in an hour of higher-priority tasks: %+v", s.state("low"))
		})
	}
}

// Higher priority is asked first, whatever the arrival order and the
// accounts; within one account and priority the order stays FIFO and a
// task told Wait is bypassed; a lower priority waits behind a higher one
// told Wait.
func TestPriorityFirstThenFIFOBypassingWaitWithinAnAccount(t *testing.T) {
	s := newSim(t, Config{}, 3)
	s.add("a1", "alice", 0, 1)
	s.add("a2", "alice", 0, 1)
	s.add("b1", "bob", 5, 1)
	s.add("a3", "alice", 5, 3) // too large once b1 holds one unit: Wait, bypassed
	s.add("a4", "alice", 5, 1)
	s.q.scanOnce()
	if want := []string{"b1", "a4"}; !slices.Equal(s.admitted, want) {
		t.Fatalf("admitted %v, want %v", s.admitted, want)
	}
	if st := s.state("a1"); st.Reason != ReasonFairShare {
		t.Errorf("a1: %+v, want held behind a3 (priority 5) waiting", st)
	}
}

// Bob's one task, submitted after alice's flood, is the next one asked
// when room frees: alice used her share, bob none of his.
func TestTheLeastUsedAccountIsAskedNext(t *testing.T) {
	s := newSim(t, Config{}, 4)
	for i := range 30 {
		s.add(fmt.Sprintf("alice-%02d", i), "alice", 0, 2)
	}
	s.q.scanOnce()
	s.clk.Step(time.Second)
	s.add("bob", "bob", 0, 2)
	s.q.scanOnce()
	st := s.state("bob")
	if st.Phase != v1alpha1.PhasePending {
		t.Fatalf("bob: %+v, want pending (the machine is full)", st)
	}
	s.clk.Step(time.Second)
	s.finish("alice-00")
	s.q.scanOnce()
	if s.state("bob").Phase != v1alpha1.PhaseReserved {
		t.Fatalf("bob after alice-00 ended: %+v; admitted %v", s.state("bob"), s.admitted)
	}
	sh := s.q.Shares()
	if len(sh) != 2 || sh[0].Account != "alice" || sh[0].Running != 1 || sh[0].Pending != 28 || sh[1].Account != "bob" || sh[1].Running != 1 {
		t.Errorf("shares: %+v", sh)
	}
}

// A task of an account below its share that waits for room holds the
// other accounts' smaller tasks (they would take the room it waits for
// forever), with a message that says so with the numbers; its own
// account's smaller tasks still bypass it.
func TestAWaitingAccountBelowItsShareHoldsTheOthers(t *testing.T) {
	s := newSim(t, Config{}, 4)
	for i := range 4 {
		s.add(fmt.Sprintf("alice-%d", i), "alice", 0, 1)
	}
	s.add("alice-more", "alice", 0, 1)
	s.q.scanOnce() // alice holds the machine
	s.clk.Step(time.Minute)
	s.add("bob-big", "bob", 0, 3)
	s.add("bob-small", "bob", 0, 1)
	s.finish("alice-0")
	s.q.scanOnce()
	if st := s.state("bob-small"); st.Phase != v1alpha1.PhaseReserved {
		t.Fatalf("bob-small: %+v, want admitted past bob-big (same account)", st)
	}
	s.finish("alice-1")
	s.q.scanOnce()
	st := s.state("alice-more")
	if st.Phase != v1alpha1.PhasePending || st.Reason != ReasonFairShare || !strings.Contains(st.Message, "bob's share: 0.") || !strings.Contains(st.Message, "alice's tasks yield") {
		t.Fatalf("alice-more: %+v, want held for bob-big with bob's numbers", st)
	}
	s.finish("alice-2")
	s.q.scanOnce()
	if st := s.state("alice-more"); st.Phase != v1alpha1.PhasePending {
		t.Fatalf("alice-more: %+v, want still held (bob-big needs 3 units, 2 are free)", st)
	}
	s.finish("alice-3")
	s.q.scanOnce()
	if st := s.state("bob-big"); st.Phase != v1alpha1.PhaseReserved {
		t.Fatalf("bob-big: %+v, want admitted once room freed", st)
	}
}

// Quotas: an account holds at most its caps (memory, running tasks);
// its next task waits naming the quota with the numbers, while other
// accounts use the room.
func TestQuotaCapsAnAccount(t *testing.T) {
	s := newSim(t, Config{Fair: share.Config{Quotas: map[string]share.Quota{
		"alice": {MemoryBytes: 3},
		"bob":   {Running: 1},
	}}}, 10)
	for i := range 4 {
		s.add(fmt.Sprintf("alice-%d", i), "alice", 0, 2)
		s.add(fmt.Sprintf("bob-%d", i), "bob", 0, 1)
	}
	s.q.scanOnce()
	if got := slices.Sorted(slices.Values(s.admitted)); !slices.Equal(got, []string{"alice-0", "bob-0"}) {
		t.Fatalf("admitted %v, want alice-0 (2 of 3 units) and bob-0 (1 running task)", got)
	}
	if st := s.state("alice-1"); st.Reason != ReasonQuota || !strings.Contains(st.Message, "alice's quota: memory 2B held + 2B asked > 3B") {
		t.Errorf("alice-1: %+v", st)
	}
	if st := s.state("bob-1"); st.Reason != ReasonQuota || !strings.Contains(st.Message, "bob's quota: running tasks 1 of 1") {
		t.Errorf("bob-1: %+v", st)
	}
	s.finish("bob-0")
	s.q.scanOnce()
	if st := s.state("bob-1"); st.Phase != v1alpha1.PhaseReserved {
		t.Errorf("bob-1 after bob-0 ended: %+v", st)
	}
	s.adm.mu.Lock()
	defer s.adm.mu.Unlock()
	if s.adm.grants-s.adm.releases != len(s.adm.active) || s.adm.badReleases != 0 {
		t.Errorf("grants %d releases %d active %d bad %d", s.adm.grants, s.adm.releases, len(s.adm.active), s.adm.badReleases)
	}
}

// At a sequence break a running task competes again: alice's task of
// three batches, which used the machine for a minute, yields its next
// batch to bob's task, which arrived meanwhile (no batch is killed:
// alice's first ends first); alice's goes on once bob's is done, its
// progress kept.
func TestAtASequenceBreakATaskOverItsShareYields(t *testing.T) {
	a := mkTask("alice", 1, 3, 1)
	a.Estimate.PerItemMemory, a.Account = 2, "alice"
	h := newHarness(t, Config{}, 2, a)
	first := h.run.nth(t, "alice", 0)
	b := mkTask("bob", 2, 1, 1)
	b.Estimate.PerItemMemory, b.Account = 2, "bob"
	if err := h.q.Upsert(b); err != nil {
		t.Fatal(err)
	}
	h.obs.waitEvent(t, "bob told to wait", func(e Event) bool { return e.Task == "bob" && e.Type == EventWaiting })
	h.clk.Step(time.Minute) // alice's usage grows, bob's is none
	if started := h.run.started("bob"); started != 0 {
		t.Fatalf("bob started %d batches while alice's batch holds the machine", started)
	}
	first.ok()
	h.obs.waitEvent(t, "alice pending at her break", func(e Event) bool {
		return e.Task == "alice" && e.Type == EventPhase && e.Phase == v1alpha1.PhasePending && e.ItemsDone == 1
	})
	bob := h.run.nth(t, "bob", 0)
	if n := h.run.started("alice"); n != 1 {
		t.Fatalf("alice started %d batches, want 1 (her next yields to bob's)", n)
	}
	bob.ok()
	h.obs.waitPhase(t, "bob", v1alpha1.PhaseDone)
	// Alice's worker polls the governor every BoundaryPoll at her break.
	for deadline := time.Now().Add(guard); h.run.started("alice") < 2; {
		if time.Now().After(deadline) {
			t.Fatal("alice's next batch never started after bob's task ended")
		}
		h.clk.Step(DefaultBoundaryPoll)
		time.Sleep(time.Millisecond)
	}
	h.run.nth(t, "alice", 1).ok()
	h.run.nth(t, "alice", 2).ok()
	if ev := h.obs.waitPhase(t, "alice", v1alpha1.PhaseDone); ev.ItemsDone != 3 {
		t.Errorf("alice done with %d items, want 3", ev.ItemsDone)
	}
}
