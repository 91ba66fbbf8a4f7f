package reconcile

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/control"
)

// A hold asked while a batch holds the memory it needs waits, with the
// governor's reason; the task's next batch, which would leave it no room,
// waits for it (no stream of batches starves the user); once granted, no
// batch is admitted into its memory until it is released, and then the
// task runs on to Done.
func TestHoldWaitsForBatchesAndKeepsThemOff(t *testing.T) {
	marks := filepath.Join(t.TempDir(), "batches")
	h, dirs, gov := testHost(t, Config{ExitWhenDone: true}, 1, func(_ int, dir string) {
		writeFile(t, filepath.Join(dir, "a.yaml"), manifest("a", "echo x >> "+marks+"; sleep 0.3", "  resources: {batch: {max: 1}, fixed: {memory: 5Gi}}\n"))
	})
	done := make(chan Outcome, 1)
	go func() {
		out, err := h.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	deadline := time.Now().Add(30 * time.Second)
	for gov.Budgets().Reservations == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no batch started within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var reasons []string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, release, err := h.Hold(ctx, control.Peer{UID: 1000, PID: 1}, control.Demand{Memory: 4 * gi, Command: "viewer"}, func(r string) { reasons = append(reasons, r) })
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) == 0 {
		t.Error("the hold was granted beside a 5Gi batch on an 8Gi machine without waiting")
	}
	if n := strings.Count(string(mustRead(t, marks)), "x"); n >= 4 {
		t.Errorf("the hold was granted only after all %d batches of the task: they did not leave it room", n)
	}
	if g.Memory != 4*gi {
		t.Errorf("granted %d bytes, want 4Gi", g.Memory)
	}
	if hs := h.Holds(); len(hs) != 1 || hs[0].Grant == nil || hs[0].Command != "viewer" {
		t.Errorf("holds listed: %+v", hs)
	}
	// Held: the task's batches (5Gi) cannot fit beside it. Sampled for a
	// while: any batch admitted meanwhile fails the test.
	for range 100 {
		if b := gov.Budgets(); b.Reservations != 1 || b.Memory.Reserved != 4*gi {
			t.Fatalf("while held: %d reservations, %d bytes reserved (want the hold alone)", b.Reservations, b.Memory.Reserved)
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	release() // exactly once: the second does nothing
	out := <-done
	if !out.AllDone {
		t.Fatalf("after the release, the task did not end Done: %+v", out.Tasks)
	}
	if len(h.Holds()) != 0 {
		t.Errorf("holds left: %+v", h.Holds())
	}
	if b := gov.Budgets(); b.Reservations != 0 {
		t.Errorf("%d reservations left", b.Reservations)
	}
	task, _ := v1alpha1.ParseManifest("a.yaml", mustRead(t, filepath.Join(dirs[0], "a.yaml")))
	if task == nil || task.Status.Phase != v1alpha1.PhaseDone {
		t.Errorf("a: %+v", task)
	}
}

// Many holds asked at once, each released twice, from many goroutines:
// never more memory granted than the machine has, every hold granted in
// the end, and nothing reserved once all are released (under -race).
func TestHoldsReleasedExactlyOnceUnderConcurrency(t *testing.T) {
	h, _, gov := testHost(t, Config{}, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan struct{})
	go func() { defer close(ran); _, _ = h.Run(ctx) }()
	var wg sync.WaitGroup
	var granted, maxSeen atomic.Int64
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, hcancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer hcancel()
			_, release, err := h.Hold(hctx, control.Peer{UID: i, PID: i}, control.Demand{Memory: gi}, func(string) {})
			if err != nil {
				t.Error(err)
				return
			}
			granted.Add(1)
			r := gov.Budgets().Memory.Reserved
			for {
				m := maxSeen.Load()
				if r <= m || maxSeen.CompareAndSwap(m, r) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			var inner sync.WaitGroup
			for range 3 {
				inner.Add(1)
				go func() { defer inner.Done(); release() }()
			}
			inner.Wait()
		}()
	}
	// Some holds ask and give up: nothing of theirs stays.
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, hcancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer hcancel()
			if _, release, err := h.Hold(hctx, control.Peer{}, control.Demand{Memory: 7 * gi}, func(string) {}); err == nil {
				release()
			}
		}()
	}
	wg.Wait()
	if granted.Load() != 40 {
		t.Errorf("%d of 40 holds granted", granted.Load())
	}
	if m := maxSeen.Load(); m > 8*gi {
		t.Errorf("%d bytes reserved at once on an 8Gi machine", m)
	}
	if b := gov.Budgets(); b.Reservations != 0 || b.Memory.Reserved != 0 {
		t.Errorf("after every release: %d reservations, %d bytes", b.Reservations, b.Memory.Reserved)
	}
	if len(h.Holds()) != 0 {
		t.Errorf("holds listed after every release: %+v", h.Holds())
	}
	cancel()
	<-ran
}
