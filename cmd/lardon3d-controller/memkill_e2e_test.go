package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// The rule: an OOM kill inside a batch's cgroup fails the batch as
// MemoryExceeded whatever its leader's exit code. A leader that shrugs
// off its child's memory kill and exits 0 (a fork bomb's, a shell
// script's without set -e) has not run its items: the attempt is not
// Done; the task is retried under the measured need.
func TestALeaderThatExits0AfterAMemoryKillIsNotDone(t *testing.T) {
	needCgroups(t)
	spool := newSpool(t)
	path := writeManifest(t, spool, "shrug.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'if [ "$LARDON3D_MEMORY_LIMIT" -lt 200000000 ]; then head -c 120m /dev/zero | tail -n 1 >/dev/null; fi; exit 0']
  items: {count: 1}
  resources: {fixed: {memory: 40Mi}}
  retries: 0
`)
	startController(t, spool, "--cgroups", "required")
	eventually(t, 60*time.Second, "the task to end", func() bool {
		ph := phaseOf(t, path)
		return ph == v1alpha1.PhaseDone || ph == v1alpha1.PhaseFailed
	})
	data, err := os.ReadFile(filepath.Join(spool, ".lardon3d", "logs", "shrug.log"))
	if err != nil {
		t.Fatal(err)
	}
	var ends []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, " ended: ") {
			ends = append(ends, line)
		}
	}
	if len(ends) == 0 || !strings.Contains(ends[0], "MemoryExceeded") {
		t.Fatalf("the first attempt, whose child the kernel killed for memory, ended %q; want MemoryExceeded whatever its leader's exit\n%s", ends, data)
	}
	task := readTask(t, path)
	if task.Status.Phase == v1alpha1.PhaseDone && (task.Status.LastBatch == nil || task.Status.LastBatch.Attempt < 2) {
		t.Errorf("Done at the attempt that was killed for memory: %+v", task.Status.LastBatch)
	}
}
