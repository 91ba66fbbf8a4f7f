package probe

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// The fixture's two GPUs with processes: each pid's memory on its GPU; a
// process on a GPU the device query did not list is nobody's; a GPU whose
// memory is "[N/A]" cannot be read; one never listed is gone; an AMD GPU
// is not measured per process.
func TestProcessGPUMemoryFixture(t *testing.T) {
	opts := fixture(t, "v2")
	script, err := filepath.Abs(filepath.Join("testdata", "nvidia-smi.sh"))
	if err != nil {
		t.Fatal(err)
	}
	opts.NvidiaSMI = script
	opts.SysRoot = t.TempDir()
	opts.Clock = clocktesting.NewFakePassiveClock(t0)
	p, _ := mustSnapshot(t, opts)
	for _, tc := range []struct {
		gpu  string
		want map[int]int64
		err  error
	}{
		{"nvidia:0", map[int]int64{4242: 512 * mib, 4343: 256 * mib}, nil},
		{"nvidia:1", map[int]int64{4242: 39000 * mib}, nil},
		{"nvidia:2", nil, ErrGPUMemoryUnreadable},
		{"nvidia:7", nil, ErrGPUGone},
		{"amdgpu:card0", nil, ErrGPUMemoryUnreadable},
	} {
		got, at, err := p.ProcessGPUMemory(tc.gpu)
		if !errors.Is(err, tc.err) || (tc.err == nil && (!reflect.DeepEqual(got, tc.want) || !at.Equal(t0))) {
			t.Errorf("%s: %v at %v, %v; want %v at %v, %v", tc.gpu, got, at, err, tc.want, t0, tc.err)
		}
	}
	devs := p.GPUDevices()
	if len(devs) != 3 || devs[0].Utilization != 37 || devs[1].Utilization != 100 || devs[2].Utilization != -1 ||
		len(devs[0].Processes) != 2 || devs[0].UUID != "GPU-0f1e2d3c-0000-4000-8000-000000000000" {
		t.Fatalf("GPUDevices: %+v", devs)
	}
	devs[0].Processes[0].Bytes = 1
	if again := p.GPUDevices(); again[0].Processes[0].Bytes != 512*mib {
		t.Errorf("GPUDevices shares its processes with the caller")
	}
}

// fakeSMI is an nvidia-smi that prints the files devices and apps of dir,
// sleeps as long as the file sleep says, fails while the file fail exists,
// and notes each device query in runs, and in overlap any query that
// started while another ran.
type fakeSMI struct{ dir, path string }

func newFakeSMI(t *testing.T) fakeSMI {
	dir := t.TempDir()
	f := fakeSMI{dir: dir, path: filepath.Join(dir, "nvidia-smi")}
	script := `#!/bin/sh
d=` + dir + `
mkdir "$d/inflight" 2>/dev/null || echo overlap >> "$d/overlap"
trap 'rmdir "$d/inflight" 2>/dev/null' EXIT
[ -e "$d/sleep" ] && sleep "$(cat "$d/sleep")"
[ -e "$d/fail" ] && { echo 'Unable to determine the device handle for GPU0000:01:00.0: GPU is lost' >&2; exit 15; }
case "$1" in
--query-compute-apps=*) cat "$d/apps" ;;
*) echo run >> "$d/runs"; cat "$d/devices" ;;
esac
`
	mkfile(t, f.path, script)
	if err := os.Chmod(f.path, 0o755); err != nil {
		t.Fatal(err)
	}
	f.set(t, "devices", "0, GPU-a, Card, 1000, 300, 700, 50\n1, GPU-b, Card, 1000, 0, 1000, 0\n")
	f.set(t, "apps", "GPU-a, 100, 300\n")
	return f
}

func (f fakeSMI) set(t *testing.T, name, content string) {
	mkfile(t, filepath.Join(f.dir, name), content)
}

func (f fakeSMI) unset(t *testing.T, name string) {
	if err := os.Remove(filepath.Join(f.dir, name)); err != nil {
		t.Fatal(err)
	}
}

// A reading is refreshed in the background once older than the period,
// and what changed shows: a process's memory, then "[N/A]", the GPU gone,
// the tool failing; meanwhile each call answers from the last reading at
// once, even while nvidia-smi takes seconds.
func TestProcessGPUMemoryRefreshes(t *testing.T) {
	f := newFakeSMI(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	opts := fixture(t, "v2")
	opts.SysRoot, opts.Clock, opts.NvidiaSMI, opts.GPUPeriod = t.TempDir(), clk, f.path, 2*time.Second
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// until polls ProcessGPUMemory on nvidia:0 until check accepts it.
	until := func(what string, check func(map[int]int64, error) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			m, _, err := p.ProcessGPUMemory("nvidia:0")
			if check(m, err) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last answer %v, %v", what, m, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if _, _, err := p.ProcessGPUMemory("nvidia:0"); !errors.Is(err, ErrGPUMemoryUnreadable) || !strings.Contains(err.Error(), "not measured yet") {
		t.Fatalf("before any measurement: %v, want unreadable, not measured yet", err)
	}
	until("the first reading", func(m map[int]int64, err error) bool { return err == nil && m[100] == 300*mib })

	f.set(t, "apps", "GPU-a, 100, 600\nGPU-a, 101, 10\n")
	if m, _, _ := p.ProcessGPUMemory("nvidia:0"); m[100] != 300*mib {
		t.Fatalf("within the period: %v, want the reading kept", m)
	}
	clk.SetTime(t0.Add(2 * time.Second))
	until("the new reading", func(m map[int]int64, err error) bool { return err == nil && m[100] == 600*mib && m[101] == 10*mib })

	f.set(t, "apps", "GPU-a, 100, [N/A]\n")
	clk.SetTime(t0.Add(4 * time.Second))
	until("[N/A]", func(_ map[int]int64, err error) bool {
		return errors.Is(err, ErrGPUMemoryUnreadable) && strings.Contains(err.Error(), "pid 100")
	})

	f.set(t, "apps", "GPU-b, 100, 5\n")
	f.set(t, "devices", "1, GPU-b, Card, 1000, 0, 1000, 0\n")
	clk.SetTime(t0.Add(6 * time.Second))
	until("the GPU gone", func(_ map[int]int64, err error) bool { return errors.Is(err, ErrGPUGone) })
	if m, _, err := p.ProcessGPUMemory("nvidia:1"); err != nil || m[100] != 5*mib {
		t.Errorf("the GPU left: %v, %v", m, err)
	}

	f.set(t, "fail", "")
	clk.SetTime(t0.Add(8 * time.Second))
	until("the tool failing", func(_ map[int]int64, err error) bool {
		return errors.Is(err, ErrGPUMemoryUnreadable) && strings.Contains(err.Error(), "GPU is lost")
	})
	f.unset(t, "fail")
	f.set(t, "devices", "0, GPU-a, Card, 1000, 300, 700, 50\n")
	f.set(t, "apps", "GPU-a, 100, 300\n")
	clk.SetTime(t0.Add(10 * time.Second))
	until("the tool back", func(m map[int]int64, err error) bool { return err == nil && m[100] == 300*mib })

	// nvidia-smi now takes 2 s: the call that starts the refresh, and
	// those during it, answer from the last reading at once.
	f.set(t, "sleep", "2")
	f.set(t, "apps", "GPU-a, 100, 900\n")
	clk.SetTime(t0.Add(12 * time.Second))
	for range 3 {
		start := time.Now()
		m, at, err := p.ProcessGPUMemory("nvidia:0")
		if took := time.Since(start); took > time.Second || err != nil || m[100] != 300*mib || !at.Equal(t0.Add(10*time.Second)) {
			t.Fatalf("during a slow refresh: %v at %v, %v after %v; want the last reading at once", m, at, err, took)
		}
	}
	until("the slow reading", func(m map[int]int64, err error) bool { return err == nil && m[100] == 900*mib })
}

// Many batches asking at once while the readings age start one refresh at
// a time: nvidia-smi never runs twice at once, and every answer is a
// reading or an error, never a partial one.
func TestProcessGPUMemoryConcurrent(t *testing.T) {
	f := newFakeSMI(t)
	f.set(t, "sleep", "0.05")
	clk := clocktesting.NewFakeClock(t0)
	opts := fixture(t, "v2")
	opts.SysRoot, opts.Clock, opts.NvidiaSMI, opts.GPUPeriod = t.TempDir(), clk, f.path, 2*time.Second
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // the clock moves a period every 20 ms; Snapshot runs too
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				clk.Step(2 * time.Second)
				if _, err := p.Snapshot(); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				m, _, err := p.ProcessGPUMemory("nvidia:0")
				if err == nil && m[100] != 300*mib {
					t.Errorf("partial reading %v", m)
				}
				if err != nil && !strings.Contains(err.Error(), "not measured yet") {
					t.Errorf("error %v", err)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	// The last refresh may still run: wait for it before reading the files.
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.gpuMem.Lock()
		busy := p.gpuMem.refreshing
		p.gpuMem.Unlock()
		if !busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "overlap")); err == nil {
		t.Errorf("nvidia-smi ran twice at once")
	}
	if n := countLines(t, filepath.Join(f.dir, "runs")); n < 3 {
		t.Errorf("nvidia-smi ran %d times over a second of aging readings, want several", n)
	}
}
