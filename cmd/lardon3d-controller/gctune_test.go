package main

import (
	"context"
	"runtime/debug"
	"testing"
)

// TestGCLimitFollowsTheLiveHeap: the limit is the floor for a small heap
// and twice the live heap, plus the slack, for a large one: a large
// spool's heap is held as the default collector holds it.
func TestGCLimitFollowsTheLiveHeap(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{0, gcFloor},
		{10 << 20, gcFloor},
		{40 << 20, gcFloor},
		{100 << 20, 216 << 20},
		{2 << 30, 4<<30 + gcSlack},
	} {
		if got := gcLimit(c.live); got != c.want {
			t.Errorf("gcLimit(%d MiB) = %d MiB, want %d MiB", c.live>>20, got>>20, c.want>>20)
		}
	}
}

// TestTuneGCLeavesWhatTheEnvironmentSays: with GOGC or GOMEMLIMIT set,
// tuneGC changes nothing; without, the collector runs at gcPercent under
// a limit.
func TestTuneGCLeavesWhatTheEnvironmentSays(t *testing.T) {
	percent := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "200")
			debug.SetGCPercent(100)
			tuneGC(ctx)
			if got := debug.SetGCPercent(100); got != 100 {
				t.Errorf("with %s set, GC percent became %d", env, got)
			}
		})
	}
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(1 << 62)
	tuneGC(ctx)
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GC percent %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(-1); got < gcFloor || got >= 1<<62 {
		t.Errorf("memory limit %d, want at least the floor %d", got, gcFloor)
	}
}
