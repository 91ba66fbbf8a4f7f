package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Without a cgroup, what leaves the batch's process group (setsid, a
// double fork, a cleared environment) is still the batch's: counted,
// paused, killed.

func TestSamplerCatchesAnAllocatorThatLeftItsGroup(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const limit = 48 << 20
	s := testSpec(t, "setsid", "-w", self)
	s.MemoryLimit = limit
	s.Timeout = 30 * time.Second // without the escapee in the count, it would only time out
	s.Env = []EnvVar{{helperEnv, "alloc"}, {allocBytesEnv, strconv.Itoa(512 << 20)}}
	b := start(t, s)
	res := b.Wait()
	if res.Reason != ReasonMemoryExceeded {
		t.Fatalf("result %+v, want MemoryExceeded; log:\n%s", res, readLog(t, s))
	}
	for pid := range b.esc.list() {
		if alive(pid) {
			t.Errorf("the allocator %d that left its group survived", pid)
		}
	}
}

func TestCancelKillsWhatLeftTheGroupWithoutCgroup(t *testing.T) {
	// A child in a session of its own, one that also cleared its
	// environment (its parent is the batch's), and a double fork whose
	// middle process ends at once (its environment is the batch's).
	s := testSpec(t, "sh", "-c", `setsid sh -c 'echo pid $$$$; exec sleep 301' &
env -i setsid sh -c 'echo pid $$$$; exec sleep 302' &
(setsid sh -c 'echo pid $$$$; exec sleep 303' &)
echo pid $$$$; exec sleep 300`)
	b := start(t, s)
	pids := pidsOf(t, s, 4)
	waitFor(t, "the sampler to find the three that left the group", func() bool { return len(b.esc.list()) >= 3 },
		func() string { return fmt.Sprintf("found %v of %v", b.esc.list(), pids) })
	b.Cancel()
	b.Wait()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d survived the cancel", pid)
		}
	}
}

func TestPauseStopsWhatLeftTheGroupWithoutCgroup(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ticks")
	s := testSpec(t, "sh", "-c",
		`setsid sh -c 'echo pid $$$$; while :; do echo x >> "$0"; sleep 0.01; done' "$0" & echo pid $$$$; exec sleep 300`, out)
	b := start(t, s)
	pidsOf(t, s, 2)
	waitFor(t, "the counter", func() bool { st, err := os.Stat(out); return err == nil && st.Size() > 0 })
	waitFor(t, "the sampler to find the counter", func() bool { return len(b.esc.list()) >= 1 })
	if err := b.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	before, _ := os.ReadFile(out)
	time.Sleep(300 * time.Millisecond)
	after, _ := os.ReadFile(out)
	if len(after) != len(before) {
		t.Errorf("the counter that left the group went on while paused: %d -> %d bytes", len(before), len(after))
	}
	if err := b.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	waitFor(t, "the counter to go on", func() bool {
		now, _ := os.ReadFile(out)
		return len(now) > len(after)
	})
}

// subreaperReport is what the "subreaper" helper prints.
type subreaperReport struct {
	Helper      int    `json:"helper"`
	Orphan      int    `json:"orphan"`
	OrphanPPID  int    `json:"orphanPPID"`
	AfterCancel string `json:"afterCancel"` // "gone", "zombie" or "alive"
	Err         string `json:"err,omitempty"`
}

// subreaperHelper plays a controller without cgroups: it adopts orphans,
// starts a batch whose child double-forks (its parent ends at once),
// reports the orphan's parent, cancels the batch and reports whether the
// orphan is gone and reaped.
func subreaperHelper() {
	rep := subreaperReport{Helper: os.Getpid()}
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(rep) }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := AdoptOrphans(ctx); err != nil {
		rep.Err = err.Error()
		return
	}
	dir := os.Getenv(runDirEnv)
	pidFile := filepath.Join(dir, "orphan.pid")
	b, err := Start(ctx, Spec{
		Task: "orphans", Command: []string{"sh", "-c", `(setsid sh -c 'echo $$$$ > "$0"; exec sleep 304' "$0" &); exec sleep 300`, pidFile},
		LogPath: filepath.Join(dir, "log"), RunDir: dir, Items: []string{"0"}, Threads: 1,
		SampleInterval: 10 * time.Millisecond, KillGrace: 2 * time.Second,
	})
	if err != nil {
		rep.Err = err.Error()
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && (rep.Orphan == 0 || rep.OrphanPPID != rep.Helper) {
		if data, err := os.ReadFile(pidFile); err == nil {
			rep.Orphan, _ = strconv.Atoi(string(data[:len(data)-1]))
			if st, err := readStat("/proc", rep.Orphan); err == nil {
				rep.OrphanPPID = st.ppid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	for time.Now().Before(deadline) && len(b.esc.list()) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	b.Cancel()
	b.Wait()
	rep.AfterCancel = "gone"
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		st, err := readStat("/proc", rep.Orphan)
		switch {
		case err != nil:
			rep.AfterCancel = "gone"
			return
		case st.state == 'Z':
			rep.AfterCancel = "zombie"
		default:
			rep.AfterCancel = "alive"
		}
	}
}

func TestOrphansComeBackToTheSubreaperAndAreReaped(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=subreaper", runDirEnv+"="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	var rep subreaperReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("helper's report %q: %v", out, err)
	}
	if rep.Err != "" {
		t.Fatal(rep.Err)
	}
	if rep.Orphan == 0 || rep.OrphanPPID != rep.Helper {
		t.Errorf("the orphan %d has parent %d, want the subreaper %d", rep.Orphan, rep.OrphanPPID, rep.Helper)
	}
	if rep.AfterCancel != "gone" {
		t.Errorf("after the cancel the orphan is %s, want gone (killed and reaped)", rep.AfterCancel)
	}
}
