package runner

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeVRAM stands in for the probe's reading of nvidia-smi: usage says
// what the batch's processes use (pids read when asked; empty until they
// are known), err fails every reading once failAfter readings attributed
// memory (failAfter 0: every reading fails; -1: none).
type fakeVRAM struct {
	mu        sync.Mutex
	usage     func() map[int]int64
	err       error
	failAfter int
	read      int
	gpus      map[string]bool
}

func (f *fakeVRAM) ProcessGPUMemory(gpuID string) (map[int]int64, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gpus[gpuID] = true
	if f.failAfter >= 0 && f.read >= f.failAfter {
		return nil, time.Time{}, f.err
	}
	m := f.usage()
	if len(m) > 0 {
		f.read++
	}
	return maps.Clone(m), time.Now(), nil
}

func newFakeVRAM() *fakeVRAM { return &fakeVRAM{gpus: map[string]bool{}, failAfter: -1} }

// A batch whose processes use more GPU memory than its contract plus the
// tolerance is killed whole as GPUMemoryExceeded, even when the process
// holding the memory left the batch's process group with setsid; the
// peak is the sum measured.
func TestGPUMemoryExceededKillsTheBatch(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := testSpec(t, "sh", "-c", `setsid sleep 300 & echo $! > "$0"; wait`, pidFile)
	s.GPUID, s.GPUMemoryLimit = "nvidia:0", 1<<30
	f := newFakeVRAM()
	f.failAfter = -1
	f.usage = func() map[int]int64 {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return nil
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return nil
		}
		return map[int]int64{pid: 3 << 30, 1: 5 << 30} // pid 1 is not the batch's
	}
	s.GPUMemory = f
	b := start(t, s)
	res := b.Wait()
	if res.Reason != ReasonGPUMemoryExceeded || res.ExitCode != -1 {
		t.Fatalf("result %+v, want GPUMemoryExceeded and exit code -1; log:\n%s", res, readLog(t, s))
	}
	if !res.GPUMemoryMeasured || res.PeakGPUMemoryBytes != 3<<30 {
		t.Errorf("GPU peak %d (measured %v), want 3GiB", res.PeakGPUMemoryBytes, res.GPUMemoryMeasured)
	}
	if want := "GPU memory 3.0GiB on nvidia:0 exceeded the contract 1.0GiB by more than 10%"; res.Message != want {
		t.Errorf("message %q, want %q", res.Message, want)
	}
	raw, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	waitFor(t, "the setsid child to die", func() bool { return pid > 0 && !alive(pid) })
	if !f.gpus["nvidia:0"] || len(f.gpus) != 1 {
		t.Errorf("GPUs asked: %v, want nvidia:0 only", f.gpus)
	}
}

// Within its contract (the tolerance included) a batch runs to its end,
// its GPU peak recorded; a batch whose GPU memory cannot be read, or whose
// GPU disappears mid-batch, is not killed on a guess: it runs to its end,
// the log says so, and the peak is what was read before (none at all:
// not measured).
func TestGPUMemoryWithinContractOrUnreadable(t *testing.T) {
	errGone := errors.New("GPU nvidia:0 is gone")
	for _, tc := range []struct {
		name      string
		used      int64
		failAfter int
		measured  bool
		logs      string
	}{
		{"within the tolerance", 1<<30 + 100<<20, -1, true, ""},
		{"never readable", 4 << 30, 0, false, "GPU memory on nvidia:0 cannot be read (GPU nvidia:0 is gone)"},
		{"gone mid-batch", 512 << 20, 2, true, "the batch is not held to its GPU memory until it can be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(t, "sleep", "0.5")
			s.GPUID, s.GPUMemoryLimit = "nvidia:0", 1<<30
			f := newFakeVRAM()
			f.err, f.failAfter = errGone, tc.failAfter
			var leader int
			var mu sync.Mutex
			f.usage = func() map[int]int64 {
				mu.Lock()
				defer mu.Unlock()
				if leader == 0 {
					return nil
				}
				return map[int]int64{leader: tc.used}
			}
			s.GPUMemory = f
			b := start(t, s)
			mu.Lock()
			leader = b.Group().PGID
			mu.Unlock()
			res := b.Wait()
			if res.Reason != "" || res.ExitCode != 0 {
				t.Fatalf("result %+v, want a plain exit; log:\n%s", res, readLog(t, s))
			}
			if res.GPUMemoryMeasured != tc.measured || (tc.measured && res.PeakGPUMemoryBytes != tc.used) {
				t.Errorf("GPU peak %d measured %v, want %d measured %v", res.PeakGPUMemoryBytes, res.GPUMemoryMeasured, tc.used, tc.measured)
			}
			if log := readLog(t, s); tc.logs != "" && strings.Count(log, tc.logs) != 1 {
				t.Errorf("log says %q %d times, want once:\n%s", tc.logs, strings.Count(log, tc.logs), log)
			}
		})
	}
}

// A batch sees only the NVIDIA GPU it reserved memory on, numbered as
// nvidia-smi numbers it; spec.env may still set the variables.
func TestGPUVisibleDevices(t *testing.T) {
	for _, tc := range []struct {
		gpu     string
		env     []EnvVar
		visible string
		order   string
	}{
		{"nvidia:1", nil, "1", "PCI_BUS_ID"},
		{"nvidia:1", []EnvVar{{"CUDA_VISIBLE_DEVICES", "0,1"}}, "0,1", "PCI_BUS_ID"},
		{"", nil, "", ""},
		{"amdgpu:card0", nil, "", ""},
		{"nvidia:x", nil, "", ""},
	} {
		s := Spec{Task: "t", Command: []string{"true"}, Threads: 1, GPUID: tc.gpu, Env: tc.env}
		env, _, err := buildEnv([]string{"PATH=/bin"}, s, "/run/items")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		if got["CUDA_VISIBLE_DEVICES"] != tc.visible || got["CUDA_DEVICE_ORDER"] != tc.order {
			t.Errorf("GPU %q env %v: CUDA_VISIBLE_DEVICES=%q CUDA_DEVICE_ORDER=%q, want %q %q",
				tc.gpu, tc.env, got["CUDA_VISIBLE_DEVICES"], got["CUDA_DEVICE_ORDER"], tc.visible, tc.order)
		}
	}
}

// Only an NVIDIA GPU's memory is measured per process: a GPU the
// configuration declared, or an AMD one, holds no batch to a reading that
// cannot come (and fills no log with it); nor does a batch without a GPU
// memory contract.
func TestVRAMWatchOnlyOnNVIDIA(t *testing.T) {
	f := newFakeVRAM()
	for _, s := range []Spec{
		{GPUID: "config", GPUMemoryLimit: 1 << 30, GPUMemory: f},
		{GPUID: "amdgpu:card0", GPUMemoryLimit: 1 << 30, GPUMemory: f},
		{GPUID: "nvidia:0", GPUMemory: f},
		{GPUID: "nvidia:0", GPUMemoryLimit: 1 << 30},
	} {
		if w := newVRAMWatch(s); w != nil {
			t.Errorf("GPU %q limit %d reader %v: a watch", s.GPUID, s.GPUMemoryLimit, s.GPUMemory != nil)
		}
	}
	if newVRAMWatch(Spec{GPUID: "nvidia:3", GPUMemoryLimit: 1 << 30, GPUMemory: f}) == nil {
		t.Error("nvidia:3 with a contract and a reader: no watch")
	}
}
