package webview

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// BenchmarkIdleView is the web view's cost with nobody looking, on a real
// host holding 10,000 Done tasks (bench/benchkit spool-gen): what the
// recorder does, a Sample every DefaultInterval and a Save of the full
// window every DefaultSaveEvery. It reports each one's time and their
// sum as core-% (100 = one core): the target is under 0.1.
func BenchmarkIdleView(b *testing.B) {
	const n = 10000
	dir := filepath.Join(b.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command("go", "run", "../../bench/benchkit", "spool-gen", "--kind", "done", "--n", fmt.Sprint(n), "--dir", dir).CombinedOutput()
	if err != nil {
		b.Fatalf("spool-gen: %v\n%s", err, out)
	}
	sp, err := spool.Open(dir, spool.Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	gov := governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1})
	snap := func() (governor.Snapshot, error) {
		return governor.Snapshot{Taken: time.Now(), MemTotal: 8 << 30, MemAvailable: 8 << 30, CPUs: 2}, nil
	}
	cfg := reconcile.Config{SpoolDir: dir, StateDir: filepath.Join(b.TempDir(), "state")}
	host := reconcile.NewHost(cfg, reconcile.Deps{Governor: gov, Snapshot: snap, Logger: zerolog.Nop()})
	host.Add(cfg, sp)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _, _ = host.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		tasks := host.Tasks()
		settled := len(tasks) == n
		for i := range tasks {
			settled = settled && tasks[i].Row.Phase == v1alpha1.PhaseDone
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d tasks listed Done after 3 minutes", len(tasks), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rec := NewRecorder(host, filepath.Join(b.TempDir(), SeriesFile), DefaultInterval, zerolog.Nop())
	// A full window: what every Save writes once the controller ran 6 hours.
	t0 := time.Now().Add(-DefaultWindow)
	for i := range rec.max() {
		rec.Sample(t0.Add(time.Duration(i) * DefaultInterval))
	}
	var sample, save time.Duration
	b.Run("sample", func(b *testing.B) {
		now := time.Now()
		for b.Loop() {
			rec.Sample(now)
		}
		sample = b.Elapsed() / time.Duration(b.N)
	})
	b.Run("save-full-window", func(b *testing.B) {
		for b.Loop() {
			rec.markDirty()
			if err := rec.Save(); err != nil {
				b.Fatal(err)
			}
		}
		save = b.Elapsed() / time.Duration(b.N)
	})
	perSecond := sample.Seconds()/DefaultInterval.Seconds() + save.Seconds()/DefaultSaveEvery.Seconds()
	b.Logf("idle view on %d Done tasks: a sample %v every %v, a save %v every %v: %.4f%% of a core", n, sample, DefaultInterval, save, DefaultSaveEvery, 100*perSecond)
	b.ReportMetric(100*perSecond, "core-%")
}
