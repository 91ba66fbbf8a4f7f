package probe

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// TestNvidiaFirstRunFailsReportsBoundDevicesUnknown: when nvidia-smi fails
// before it ever succeeded (a driver still loading, a first run that timed
// out), the devices bound to the nvidia driver are reported present and
// unmeasurable, so the governor waits (GPUUnknown) instead of rejecting
// (NoGPU). Once the tool answers, they are measured.
func TestNvidiaFirstRunFailsReportsBoundDevicesUnknown(t *testing.T) {
	dir := t.TempDir()
	mkfile(t, filepath.Join(dir, "bus", "pci", "drivers", "nvidia", "0000:01:00.0", "vendor"), "0x10de\n")
	fail := filepath.Join(dir, "fail")
	mkfile(t, fail, "")
	script := filepath.Join(dir, "nvidia-smi")
	mkfile(t, script, "#!/bin/sh\n[ -e "+fail+" ] && { echo 'NVIDIA-SMI has failed' >&2; exit 9; }\ncase \"$1\" in --query-compute-apps=*) exit 0;; esac\necho '0, GPU-card, Card, 1000, 250, 750, 0'\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakePassiveClock(t0)
	opts := fixture(t, "v2")
	opts.Clock = clk
	opts.SysRoot = dir
	opts.NvidiaSMI = script
	p, s := mustSnapshot(t, opts)
	want := []governor.GPU{{ID: "nvidia:0", Name: "NVIDIA GPU 0000:01:00.0"}}
	if !reflect.DeepEqual(s.GPUs, want) {
		t.Fatalf("first run failed: GPUs = %+v, want %+v (present, unknown)", s.GPUs, want)
	}
	if p.LastGPUError() == nil {
		t.Fatal("LastGPUError() = nil after a failed run")
	}

	// The governor waits for it rather than rejecting.
	g := governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1})
	g.Update(s)
	if d := g.Decide(governor.Estimate{BatchMin: 1, BatchMax: 1, Threads: 1, MinThreads: 1, GPUSlots: 1, FixedGPUMemory: 100 << 20}); d.Verdict != governor.Wait || d.Reason != governor.ReasonGPUUnknown {
		t.Fatalf("decision on an unmeasurable GPU: %s, want WAIT GPUUnknown", d)
	}

	if err := os.Remove(fail); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(t0.Add(DefaultGPUPeriod))
	s, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	known := []governor.GPU{{ID: "nvidia:0", Name: "Card", Known: true, TotalBytes: 1000 * mib, FreeBytes: 750 * mib}}
	if !reflect.DeepEqual(s.GPUs, known) {
		t.Fatalf("after the tool recovered: GPUs = %+v, want %+v", s.GPUs, known)
	}
}

// TestScratchMeasuredOnceThenUnmeasurableStaysUnknown: a scratch directory
// that was measured and cannot be stat'ed for a moment is reported present
// with unknown free space (its rotational flag kept), never dropped; one
// never measured is left out; a new measure replaces the unknown.
func TestScratchMeasuredOnceThenUnmeasurableStaysUnknown(t *testing.T) {
	broken := false
	opts := fixture(t, "v1")
	opts.ScratchDirs = []string{"/scratch/hdd", "/scratch/never"}
	opts.StatVolume = func(path string) (VolumeStat, error) {
		if path == "/scratch/hdd" && !broken {
			return VolumeStat{FreeBytes: 500 * gib, Dev: unix.Mkdev(8, 1)}, nil
		}
		return VolumeStat{}, errors.New("statfs: input/output error")
	}
	p, s := mustSnapshot(t, opts)
	measured := []governor.ScratchVolume{{Path: "/scratch/hdd", FreeBytes: 500 * gib, Rotational: true}}
	if !reflect.DeepEqual(s.Scratch, measured) {
		t.Fatalf("measured: %+v, want %+v", s.Scratch, measured)
	}
	broken = true
	s, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	unknown := []governor.ScratchVolume{{Path: "/scratch/hdd", Rotational: true, Unknown: true}}
	if !reflect.DeepEqual(s.Scratch, unknown) {
		t.Fatalf("unmeasurable: %+v, want %+v", s.Scratch, unknown)
	}

	// The governor waits for it rather than rejecting.
	g := governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1})
	g.Update(s)
	if d := g.Decide(governor.Estimate{BatchMin: 1, BatchMax: 1, Threads: 1, MinThreads: 1, ScratchBytes: gib}); d.Verdict != governor.Wait || d.Reason != governor.ReasonScratchUnknown {
		t.Fatalf("decision on an unmeasurable volume: %s, want WAIT ScratchUnknown", d)
	}

	broken = false
	if s, err = p.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Scratch, measured) {
		t.Fatalf("measured again: %+v, want %+v", s.Scratch, measured)
	}
}
