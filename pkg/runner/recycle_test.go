package runner

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
)

// groupSeen is a batch's cgroup as the test saw it while the batch ran.
type groupSeen struct {
	dir   string
	ino   uint64
	limit int64 // the kernel's hard limit file, read back
	memsw int64 // v1 memory.memsw.limit_in_bytes, -2 where there is none
}

// runSeen starts s, reads its cgroup at once (the commands below outlive
// the reading), calls during (when not nil) and waits for the batch and
// its group's hand-back.
func runSeen(t *testing.T, s Spec, during func(*Batch)) (Result, groupSeen) {
	t.Helper()
	b := start(t, s)
	ref := b.Group().Cgroup
	if ref == nil {
		t.Fatal("the batch has no cgroup")
	}
	g := groupSeen{dir: ref.Main(), memsw: -2}
	var st syscall.Stat_t
	if err := syscall.Stat(g.dir, &st); err != nil {
		t.Fatalf("the running batch's cgroup: %v", err)
	}
	g.ino = st.Ino
	limitFile := "memory.max"
	if ref.Version == 1 {
		limitFile = "memory.limit_in_bytes"
		if v, err := os.ReadFile(filepath.Join(g.dir, "memory.memsw.limit_in_bytes")); err == nil {
			g.memsw, _ = strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		}
	}
	v, err := os.ReadFile(filepath.Join(g.dir, limitFile))
	if err != nil {
		t.Fatal(err)
	}
	g.limit, _ = strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	if during != nil {
		during(b)
	}
	res := b.Wait()
	<-b.Done()
	return res, g
}

func TestCgroupIsReusedOnlyWhenAsGoodAsNew(t *testing.T) {
	needPython(t)
	// The page cache of a file is charged to the group of the first
	// reader: python's files are read here first, outside every batch's
	// group, so that a batch running python leaves only its kernel
	// memory (on a fresh machine, or after the cache was dropped, the
	// first batch kept megabytes of it and was not reused).
	if out, err := exec.Command("python3", "-c", "import time").CombinedOutput(); err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	tree := testTree(t)
	v1 := tree.Version() == 1
	spec := func(contract int64, command ...string) Spec {
		s := cgSpec(t, tree, command...)
		s.MemoryLimit = contract
		return s
	}
	var prev groupSeen
	prevStays := false // the previous batch's group is kept, not reused
	step := func(what string, s Spec, wantReused bool, during func(*Batch)) (Result, groupSeen) {
		t.Helper()
		res, g := runSeen(t, s, during)
		d, err := s.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		want := d.kernelLimit(tree.Version()) &^ (int64(os.Getpagesize()) - 1) // the kernel counts pages
		if g.limit != want || (g.memsw != -2 && g.memsw != want) {
			t.Errorf("%s: limit %d, memory+swap %d; want %d", what, g.limit, g.memsw, want)
		}
		if reused := g.ino == prev.ino; reused != (wantReused && v1) {
			t.Errorf("%s: in the previous batch's group %v (inode %d, then %d), want %v", what, reused, prev.ino, g.ino, wantReused && v1)
		}
		if g.dir == prev.dir {
			t.Errorf("%s: the group kept the previous batch's name %s", what, g.dir)
		}
		if _, err := os.Stat(prev.dir); prev.dir != "" && !prevStays && !os.IsNotExist(err) {
			t.Errorf("%s: the previous batch's group %s is still there (%v)", what, prev.dir, err)
		}
		prev = g
		return res, g
	}
	alloc := func(mib int) []string {
		return []string{"python3", "-c", "import time; b = bytearray(b'x') * (" + strconv.Itoa(mib) + " << 20); time.sleep(0.3)"}
	}

	res, _ := step("48 MiB under 256 MiB", spec(256<<20, alloc(48)...), false, nil)
	if res.ExitCode != 0 || res.PeakMemoryBytes < 48<<20 {
		t.Fatalf("the first batch: %+v", res)
	}
	// Lower, then higher, than the group's limit: the kernel wants the
	// memory+swap limit above the limit at every step.
	res, _ = step("sleep under 32 MiB", spec(32<<20, "sleep", "0.3"), true, nil)
	if res.ExitCode != 0 || res.PeakMemoryBytes >= 8<<20 {
		t.Errorf("sleep after 48 MiB in the same group: %+v; want a peak of its own, not the earlier batch's", res)
	}
	if res, _ = step("sleep under 512 MiB", spec(512<<20, "sleep", "0.3"), true, nil); res.ExitCode != 0 {
		t.Errorf("sleep under a higher limit: %+v", res)
	}
	// Below the kernel's floor the runner holds the working set to the
	// contract: a kept group's residue would count there.
	prevStays = v1
	if res, _ = step("sleep under 1 MiB", spec(1<<20, "sleep", "0.3"), false, nil); res.ExitCode != 0 {
		t.Errorf("sleep under 1 MiB: %+v", res)
	}
	prevStays = false
	res, _ = step("128 MiB under 16 MiB", spec(16<<20, alloc(128)...), true, nil)
	if res.Reason != ReasonMemoryExceeded || res.OOMKills == 0 {
		t.Fatalf("128 MiB under 16 MiB: %+v, want killed by the kernel", res)
	}
	// The OOM count cannot be reset: that group is not reused.
	res, _ = step("after an OOM kill", spec(64<<20, "sleep", "0.3"), false, nil)
	if res.ExitCode != 0 || res.Reason != "" || res.OOMKills != 0 {
		t.Errorf("the batch after an OOM kill: %+v, want a clean end", res)
	}
	// A group once frozen is not reused either.
	pause := func(b *Batch) {
		if err := b.Pause(); err != nil {
			t.Fatal(err)
		}
		if err := b.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if res, _ := step("paused", spec(64<<20, "sleep", "0.5"), true, pause); res.ExitCode != 0 {
		t.Errorf("the paused batch: %+v", res)
	}
	if res, _ := step("after a pause", spec(64<<20, "sleep", "0.3"), false, nil); res.ExitCode != 0 {
		t.Errorf("after a pause: %+v", res)
	}
}

// A Pause racing the batch's end must not leave a frozen group to the next
// batch: each batch's group is thawed when it starts, and each ends.
func TestCgroupPauseRacingTheEndLeavesNoFrozenGroup(t *testing.T) {
	tree := testTree(t)
	if tree.Version() != 1 {
		t.Logf("cgroup v%d: groups are not reused, the race is only checked for a clean end", tree.Version())
	}
	for i := range 40 {
		s := cgSpec(t, tree, "true")
		b := start(t, s)
		if d, ok := b.Group().Cgroup.Dirs[cgroup.Freezer]; ok {
			if v, err := os.ReadFile(filepath.Join(d, "freezer.state")); err == nil && strings.TrimSpace(string(v)) != "THAWED" {
				t.Fatalf("batch %d starts in a group %s", i, strings.TrimSpace(string(v)))
			}
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for j := 0; j < 1000 && !errors.Is(b.Pause(), ErrBatchEnded); j++ {
				_ = b.Resume()
			}
		})
		select {
		case <-b.Done():
		case <-time.After(20 * time.Second):
			t.Fatalf("batch %d did not end", i)
		}
		wg.Wait()
	}
}

// A run that ends removes its subtree: the groups kept for reuse go with it.
func TestTreeRemoveTakesTheKeptGroups(t *testing.T) {
	tree := testTree(t)
	b := start(t, cgSpec(t, tree, "true"))
	kept := b.Group().Cgroup.Main()
	if res := b.Wait(); res.ExitCode != 0 {
		t.Fatalf("true: %+v", res)
	}
	<-b.Done()
	if _, err := os.Stat(kept); (err == nil) != (tree.Version() == 1) {
		t.Fatalf("cgroup v%d: after the batch, its group %s: %v", tree.Version(), kept, err)
	}
	if err := tree.Remove(); err != nil {
		t.Fatalf("Remove with a group kept: %v", err)
	}
	if _, err := os.Stat(tree.Dir()); !os.IsNotExist(err) {
		t.Errorf("the subtree %s is still there: %v", tree.Dir(), err)
	}
}
