package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// A controller stopped (SIGSTOP) past its batches' timeouts wakes to fired
// timers and exited leaders at once: the batches, which exited 0 well in
// time, are Done at their first attempt, never BatchTimeout, and their end
// is their own (about 2 s after the start, not the 7 s the controller slept).
// Two batches (the two CPUs of a small machine), so that a supervisor
// picking the timer or the exit at random passes 1 time in 4.
func TestAStoppedControllerDoesNotBlameItsBatches(t *testing.T) {
	spool := newSpool(t)
	var paths []string
	for i := range 2 {
		paths = append(paths, writeManifest(t, spool, fmt.Sprintf("s%d.yaml", i), `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'sleep 2.17']
  items: {count: 1}
  retries: 0
  batchTimeout: 4s
`))
	}
	c := startController(t, spool)
	eventually(t, 30*time.Second, "two sleepers running", func() bool { return len(pidsRunning("sleep", "2.17")) == 2 })
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(7 * time.Second) // past every timeout, the sleepers long gone
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		eventually(t, 30*time.Second, p+" to end", func() bool {
			ph := phaseOf(t, p)
			return ph == v1alpha1.PhaseDone || ph == v1alpha1.PhaseFailed
		})
		task := readTask(t, p)
		if task.Status.Phase != v1alpha1.PhaseDone {
			t.Errorf("%s: %s after a controller stall, want Done (it exited 0 in 2 s under a 4 s timeout)", filepath.Base(p), task.Status.Phase)
			continue
		}
		if lb := task.Status.LastBatch; lb == nil || lb.Attempt != 1 {
			t.Errorf("%s: last batch %+v, want attempt 1 (no retry spent)", filepath.Base(p), lb)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(spool, ".lardon3d", "logs", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, "ended:") {
				continue
			}
			if strings.Contains(line, "BatchTimeout") {
				t.Errorf("%s: %s", filepath.Base(l), line)
			}
			var d time.Duration
			if i := strings.Index(line, " after "); i >= 0 {
				d, _ = time.ParseDuration(strings.Fields(line[i+len(" after "):])[0])
			}
			if d >= 5*time.Second {
				t.Errorf("%s: the batch's end is the controller's wake-up, not its exit: %s", filepath.Base(l), line)
			}
		}
	}
}
