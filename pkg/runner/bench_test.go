package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
)

// BenchmarkTrueBatch is the runner's cost for one batch of `true`, with the
// RSS sampler alone and in a cgroup of its own: what enforcement adds to a
// short batch (compare the two in one run). Each batch's cgroup is handed
// back (Done) before the next starts, and counts in its cost.
func BenchmarkTrueBatch(b *testing.B) {
	tree, err := cgroup.Open(cgroup.Options{Name: fmt.Sprintf("lardon3d-bench-%d", os.Getpid())})
	if err != nil && !errors.Is(err, cgroup.ErrUnavailable) {
		b.Fatal(err)
	}
	if tree != nil {
		defer func() { _, _ = KillLeftoverCgroups(tree); _ = tree.Remove() }()
	}
	for _, mode := range []string{"sampler", "cgroup"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "cgroup" && tree == nil {
				b.Skipf("no memory cgroup here: %v", err)
			}
			dir := b.TempDir()
			s := Spec{Task: "t", Command: []string{"true"}, LogPath: filepath.Join(dir, "log"), RunDir: dir,
				Items: []string{"0"}, ItemsTotal: 1, MemoryLimit: 64 << 20}
			if mode == "cgroup" {
				s.Cgroup = tree
			}
			for b.Loop() {
				bt, err := Start(context.Background(), s)
				if err != nil {
					b.Fatal(err)
				}
				if res := bt.Wait(); res.ExitCode != 0 {
					b.Fatalf("%+v", res)
				}
				// Its cgroup handed back before the next batch, as with one
				// slot: on v1 every batch after the first reuses it.
				<-bt.Done()
			}
		})
	}
	// Two slots, each starting its next batch as soon as the last one's
	// result is out (Wait), as the queue's workers do: the cgroup's
	// hand-back and the mark scan are then off the path, and what counts
	// is how soon the result reaches the one waiting for it.
	b.Run("cgroup-two-slots", func(b *testing.B) {
		if tree == nil {
			b.Skipf("no memory cgroup here: %v", err)
		}
		dir := b.TempDir()
		var next atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		b.ResetTimer()
		for slot := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last *Batch
				for next.Add(1) <= int64(b.N) {
					s := Spec{Task: fmt.Sprintf("t%d", slot), Command: []string{"true"}, LogPath: filepath.Join(dir, fmt.Sprintf("log%d", slot)),
						RunDir: dir, Items: []string{"0"}, ItemsTotal: 1, MemoryLimit: 64 << 20, Cgroup: tree}
					bt, err := Start(context.Background(), s)
					if err != nil {
						errs <- err
						return
					}
					if res := bt.Wait(); res.ExitCode != 0 {
						errs <- fmt.Errorf("%+v", res)
						return
					}
					last = bt
				}
				if last != nil {
					<-last.Done()
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	})
}

// BenchmarkMarkScan is the end-of-batch search for a batch's processes
// that left its cgroup, over every process of the machine and over those
// started after the leader only, as a batch's end does (compare the two
// in one run).
func BenchmarkMarkScan(b *testing.B) {
	for _, c := range []struct {
		name  string
		after int
	}{{"all", 0}, {"after-leader", os.Getpid()}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := killByEnv(procfs.DefaultMountPoint, BatchIDEnv+"=no-such-batch", c.after); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
