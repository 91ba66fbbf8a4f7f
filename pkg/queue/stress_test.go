package queue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// lockedCheckHeld checks, under the queue's lock then the admitter's (the
// queue's lock order), that every task in a phase that needs a reservation
// holds one the admitter knows as active, and that MaxParallel holds.
func checkHeld(q *Queue, adm *fakeAdm) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	adm.mu.Lock()
	defer adm.mu.Unlock()
	var bad []string
	for name, e := range q.mu.tasks {
		switch e.phase {
		case v1alpha1.PhaseReserved, v1alpha1.PhaseRunning, v1alpha1.PhasePaused:
			if !e.hasRes || e.contract == nil {
				bad = append(bad, fmt.Sprintf("%s is %s without a reservation (state %d closed %v reason %q msg %q)", name, e.phase, e.state, q.mu.closed, e.reason, e.message))
			} else if _, ok := adm.active[idOf(e.res)]; !ok {
				bad = append(bad, fmt.Sprintf("%s is %s with reservation %d not active", name, e.phase, idOf(e.res)))
			}
		}
	}
	if q.cfg.MaxParallel > 0 && q.mu.active > q.cfg.MaxParallel {
		bad = append(bad, fmt.Sprintf("%d workers, max-parallel %d", q.mu.active, q.cfg.MaxParallel))
	}
	return bad
}

// TestStressInvariants runs producers (Upsert, Remove, SetPaused), batch
// finishers (exit 0, non-zero, MemoryExceeded) and a checker concurrently
// under -race. Invariants, checked by the instrumented admitter and runner:
// active reservations never exceed the budget; no reservation is released
// twice or released when not active; no batch starts, pauses or resumes
// without an active reservation, nor beyond its contract's batch; no task is
// Reserved, Running or Paused without an active reservation; MaxParallel
// holds; after Close no reservation is active and grants equal releases.
func TestStressInvariants(t *testing.T) {
	for _, maxParallel := range []int{0, 3} {
		t.Run(fmt.Sprintf("maxParallel=%d", maxParallel), func(t *testing.T) {
			stress(t, maxParallel, 8, 4, 1500)
		})
	}
}

// stress runs until the finishers have ended target batches (or the
// producers made 40,000 operations each).
func stress(t *testing.T, maxParallel, producers, finishers int, target int64) {
	adm := newFakeAdm(20)
	run := &fakeRunner{adm: adm}
	started := make(chan *fakeBatch, 1<<16)
	run.onStart = func(fb *fakeBatch) { started <- fb }
	obs := &recorder{}
	q := New(Config{
		MaxParallel:  maxParallel,
		RescanWait:   time.Millisecond,
		BoundaryPoll: 100 * time.Microsecond,
		RetryBackoff: time.Microsecond,
	}, adm, run, obs)
	runDone := make(chan error, 1)
	go func() { runDone <- q.Run(context.Background()) }()

	names := make([]string, 24)
	for i := range names {
		names[i] = fmt.Sprintf("t%02d", i)
	}
	stop := make(chan struct{})
	var finWG, prodWG sync.WaitGroup
	var finished atomic.Int64
	for i := range finishers {
		finWG.Add(1)
		go func() {
			defer finWG.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for {
				select {
				case <-stop:
					return
				case fb := <-started:
					finished.Add(1)
					switch p := rng.IntN(10); {
					case p < 7:
						fb.ok()
					case p < 9:
						fb.finish(BatchResult{ExitCode: 1})
					default:
						fb.finish(BatchResult{ExitCode: -1, Reason: v1alpha1.ReasonMemoryExceeded})
					}
				}
			}
		}()
	}
	var checkErrs []string
	var checkMu sync.Mutex
	checkDone := make(chan struct{})
	go func() {
		defer close(checkDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if bad := checkHeld(q, adm); len(bad) > 0 {
				checkMu.Lock()
				checkErrs = append(checkErrs, bad...)
				checkMu.Unlock()
			}
		}
	}()
	for p := range producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 42))
			for i := 0; i < 40000 && finished.Load() < target; i++ {
				runtime.Gosched()
				name := names[rng.IntN(len(names))]
				var err error
				switch op := rng.IntN(10); {
				case op < 5:
					tk := mkTask(name, int64(rng.IntN(50)), int64(1+rng.IntN(12)), int64(1+rng.IntN(6)))
					tk.Generation = int64(rng.IntN(3))
					tk.Retries = rng.IntN(2)
					tk.Paused = rng.IntN(8) == 0
					if rng.IntN(4) == 0 {
						tk.DependsOn = []string{names[rng.IntN(len(names))]}
					}
					err = q.Upsert(tk)
				case op < 7:
					err = q.Remove(name)
				default:
					err = q.SetPaused(name, rng.IntN(2) == 0)
				}
				if err != nil && !errors.Is(err, ErrSpecPending) && !errors.Is(err, ErrNotFound) {
					t.Errorf("op on %s: %v", name, err)
				}
			}
		}()
	}
	prodWG.Wait()
	// Resume everything so that paused batches can end, then close.
	for _, n := range names {
		_ = q.SetPaused(n, false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	close(stop)
	finWG.Wait()
	<-checkDone
	if err := <-runDone; err != nil {
		t.Errorf("run: %v", err)
	}
	if err := q.Close(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("second close: %v", err)
	}
	for _, e := range checkErrs {
		t.Error(e)
	}
	for _, v := range run.violationList() {
		t.Error(v)
	}
	adm.mu.Lock()
	defer adm.mu.Unlock()
	if len(adm.active) != 0 || adm.used != 0 {
		t.Errorf("%d reservations (%d units) active after Close", len(adm.active), adm.used)
	}
	if adm.badReleases != 0 || adm.overBudgetSeen || adm.grants != adm.releases {
		t.Errorf("bad releases %d, over budget %v, grants %d, releases %d", adm.badReleases, adm.overBudgetSeen, adm.grants, adm.releases)
	}
	if maxParallel > 0 && adm.maxActive > maxParallel {
		t.Errorf("%d reservations at once, max-parallel %d", adm.maxActive, maxParallel)
	}
	if finished.Load() < target {
		t.Errorf("only %d batches finished: the stress did not exercise the queue", finished.Load())
	}
	if adm.grants < 20 {
		t.Errorf("only %d grants: the stress did not exercise the queue", adm.grants)
	}
	t.Logf("grants %d, batches %d, max active %d", adm.grants, len(run.batches), adm.maxActive)
}
