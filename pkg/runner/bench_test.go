package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
