package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// peakRSS is a process's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// Tiny manifests, small controller: four tasks of ten million counted
// items each (batches of millions once the estimate is firm) run to Done
// with the controller's peak resident memory far below what one string
// per item would cost (four such manifests took it to 851 MB; a count's
// range is now written to the items file as decimals through a buffer).
func TestTenMillionCountedItemsCostTheControllerNothing(t *testing.T) {
	spool := newSpool(t)
	var paths []string
	for i := range 4 {
		paths = append(paths, writeManifest(t, spool, fmt.Sprintf("c%d.yaml", i), `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [sh, -c, 'exit 0']
  items: {count: 10000000}
`))
	}
	c := startController(t, spool)
	for _, p := range paths {
		eventually(t, 120*time.Second, p+" Done", func() bool { return phaseOf(t, p) == v1alpha1.PhaseDone })
	}
	if peak := peakRSS(t, c.cmd.Process.Pid); peak > 200<<20 {
		t.Errorf("the controller peaked at %d MiB for four 10M-item counts; want well under 200 MiB", peak>>20)
	}
}

// `budgets` shows the running controller's own memory beside the budgets.
func TestBudgetsShowTheControllersOwnMemory(t *testing.T) {
	spool := newSpool(t)
	startController(t, spool)
	var out string
	eventually(t, 20*time.Second, "budgets to show the controller's own memory", func() bool {
		out, _ = runCLI(t, "budgets", "--spool", spool)
		return strings.Contains(out, "the controller's own memory: RSS ")
	})
}
