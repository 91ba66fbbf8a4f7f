package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// synthBin is the binary built once by TestMain.
var synthBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lardon3d-synth-test")
	if err != nil {
		panic(err)
	}
	synthBin = filepath.Join(dir, "lardon3d-synth")
	build := exec.Command("go", "build", "-o", synthBin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		panic("build lardon3d-synth: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
	maxRSS         int64 // bytes
	cpu            time.Duration
}

func runSynth(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(synthBin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run synth: %v", err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return result{
		code:   cmd.ProcessState.ExitCode(),
		stdout: out.String(),
		stderr: errb.String(),
		maxRSS: ru.Maxrss << 10, // KiB on Linux
		cpu:    time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
	}
}

// TestSynthResidentMemory: fixed 64Mi + 16Mi × 4 items is really resident.
func TestSynthResidentMemory(t *testing.T) {
	r := runSynth(t, []string{"LARDON3D_BATCH_SIZE=4", "LARDON3D_THREADS=2"},
		"--fixed", "64Mi", "--per-item", "16Mi", "--cpu-per-item", "10ms")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if r.maxRSS < 120<<20 || r.maxRSS >= 160<<20 {
		t.Fatalf("peak RSS %d MiB, want in [120, 160)", r.maxRSS>>20)
	}
	line := regexp.MustCompile(`^synth: batch of 4 items, (\d+) MiB resident, [0-9.]+ CPU-s on 2 threads\n$`)
	m := line.FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("stdout %q does not match %s", r.stdout, line)
	}
	if mib, err := strconv.Atoi(m[1]); err != nil || mib < 120 || mib >= 160 {
		t.Errorf("reported %s MiB resident, want in [120, 160)", m[1])
	}
}

// TestSynthBurnsCPU: cpu-per-item × batch of CPU time is spent (a lower
// bound on CPU accounting, not a wall-clock assertion).
func TestSynthBurnsCPU(t *testing.T) {
	r := runSynth(t, []string{"LARDON3D_BATCH_SIZE=3", "LARDON3D_THREADS=2"},
		"--fixed", "0", "--per-item", "0", "--cpu-per-item", "100ms")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if r.cpu < 300*time.Millisecond {
		t.Fatalf("child used %v of CPU, want >= 300ms", r.cpu)
	}
	if !strings.Contains(r.stdout, "on 2 threads") {
		t.Errorf("stdout %q", r.stdout)
	}
}

func TestSynthExitCodes(t *testing.T) {
	small := []string{"--fixed", "1Mi", "--per-item", "0", "--cpu-per-item", "0s"}
	if r := runSynth(t, nil, append(small, "--fail-exit", "3")...); r.code != 3 {
		t.Errorf("--fail-exit 3: exit %d, want 3", r.code)
	}
	if r := runSynth(t, []string{"LARDON3D_SYNTH_FAIL_EXIT=4"}, small...); r.code != 4 {
		t.Errorf("LARDON3D_SYNTH_FAIL_EXIT=4: exit %d, want 4", r.code)
	}
	if r := runSynth(t, []string{"LARDON3D_SYNTH_FAIL_EXIT=4"}, append(small, "--fail-exit", "0")...); r.code != 0 {
		t.Errorf("flag 0 over env 4: exit %d, want 0", r.code)
	}
	if r := runSynth(t, nil, "--fixed", "nonsense"); r.code != 2 || !strings.Contains(r.stderr, "nonsense") {
		t.Errorf("bad flag: exit %d stderr %q, want 2 naming the value", r.code, r.stderr)
	}
	if r := runSynth(t, []string{"LARDON3D_THREADS=0"}, small...); r.code != 2 {
		t.Errorf("LARDON3D_THREADS=0: exit %d, want 2", r.code)
	}

	items := filepath.Join(t.TempDir(), "items")
	if err := os.WriteFile(items, []byte("a.jpg\nb.jpg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"LARDON3D_ITEMS_FILE=" + items, "LARDON3D_BATCH_START=10"}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--fail-on-item", "b.jpg"}, 1},
		{[]string{"--fail-on-item", "b.jpg", "--fail-exit", "7"}, 7},
		{[]string{"--fail-on-item", "11"}, 1},
		{[]string{"--fail-on-item", "12", "--fail-exit", "7"}, 0},
		{[]string{"--fail-on-item", "z.jpg"}, 0},
	} {
		if r := runSynth(t, env, append(small, tc.args...)...); r.code != tc.want {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, r.code, tc.want, r.stderr)
		}
	}
}

func TestSynthRecord(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "record")
	items := filepath.Join(dir, "items")
	if err := os.WriteFile(items, []byte("a.jpg\nb.jpg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	small := []string{"--fixed", "0", "--per-item", "0", "--cpu-per-item", "0s", "--record", rec}
	runSynth(t, []string{"LARDON3D_TASK=t1", "LARDON3D_ITEMS_FILE=" + items}, small...)
	runSynth(t, []string{"LARDON3D_TASK=t2", "LARDON3D_BATCH_SIZE=2", "LARDON3D_BATCH_START=4"}, small...)
	got, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if want := "t1\ta.jpg\nt1\tb.jpg\nt2\t4\nt2\t5\n"; string(got) != want {
		t.Fatalf("record = %q, want %q", got, want)
	}
}

// TestSynthReportsProgress: --progress prints one report per item, in
// order, before the summary line, and burns the same CPU.
func TestSynthReportsProgress(t *testing.T) {
	r := runSynth(t, []string{"LARDON3D_BATCH_SIZE=3", "LARDON3D_THREADS=1"},
		"--fixed", "0", "--per-item", "0", "--cpu-per-item", "20ms", "--progress")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	want := "LARDON3D_PROGRESS 1/3\nLARDON3D_PROGRESS 2/3\nLARDON3D_PROGRESS 3/3\nsynth: batch of 3 items"
	if !strings.HasPrefix(r.stdout, want) {
		t.Fatalf("stdout %q, want it to start with %q", r.stdout, want)
	}
	if r.cpu < 60*time.Millisecond {
		t.Errorf("burned %v of CPU, want at least 60ms", r.cpu)
	}
}

// TestSynthGrows: with --grow, each item's memory is mapped when its turn
// comes: the resident set after the first item holds fixed + one item,
// after the last fixed + every item.
func TestSynthGrows(t *testing.T) {
	cmd := exec.Command(synthBin, "--fixed", "16Mi", "--per-item", "32Mi", "--cpu-per-item", "200ms", "--grow", "--progress")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LARDON3D_BATCH_SIZE=4", "LARDON3D_THREADS=1", "LARDON3D_SYNTH_HOLD=300ms"}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	rss := func() int64 {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "status"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no VmRSS in %s", b)
		}
		kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return kb << 10
	}
	var after []int64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "LARDON3D_PROGRESS ") {
			after = append(after, rss()) // the next item's memory comes after this line
		}
	}
	if len(after) != 4 {
		t.Fatalf("%d progress lines, want 4", len(after))
	}
	// Read after the line, the next item may be mapped already (its CPU,
	// 200 ms, not): after the first, fixed and one or two items.
	if after[0] < 48<<20 || after[0] >= 96<<20 || after[3] < 144<<20 || after[3] >= 176<<20 {
		t.Errorf("resident after items 1..4: %d MiB, want [48, 96) first and [144, 176) last", []int64{after[0] >> 20, after[1] >> 20, after[2] >> 20, after[3] >> 20})
	}
}
