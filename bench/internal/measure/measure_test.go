package measure

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const statLine = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 12 0 0 20 0 1 0 987654 1000 50 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"

func TestParseStat(t *testing.T) {
	s, err := ParseStat(statLine)
	if err != nil {
		t.Fatal(err)
	}
	if s.PPid != 1 || s.UTime != 37 || s.STime != 12 || s.StartTicks != 987654 {
		t.Fatalf("got %+v", s)
	}
	if s.CPUTicks() != 49 {
		t.Fatalf("cpu ticks %d", s.CPUTicks())
	}
	if _, err := ParseStat("4242 no paren"); err == nil {
		t.Fatal("want error without ')'")
	}
	if _, err := ParseStat("1 (x) S 1 2"); err == nil {
		t.Fatal("want error on a short line")
	}
}

func TestParseStatmRSS(t *testing.T) {
	n, err := ParseStatmRSS("1000 250 30 1 0 80 0\n")
	if err != nil || n != 250 {
		t.Fatalf("got %d, %v", n, err)
	}
	if _, err := ParseStatmRSS("1000"); err == nil {
		t.Fatal("want error on one field")
	}
}

func TestParseSelfCgroup(t *testing.T) {
	text := "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/unified/y\n"
	for _, tc := range []struct{ ctl, want string }{
		{"memory", "/process_api/abc"}, {"cpuacct", "/x"}, {"", "/unified/y"},
	} {
		got, ok := ParseSelfCgroup(strings.NewReader(text), tc.ctl)
		if !ok || got != tc.want {
			t.Errorf("%q: got %q %v, want %q", tc.ctl, got, ok, tc.want)
		}
	}
	if _, ok := ParseSelfCgroup(strings.NewReader(text), "pids"); ok {
		t.Error("pids is not in the text")
	}
}

func TestParseKeyed(t *testing.T) {
	v, ok := ParseKeyed(strings.NewReader("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"), "oom_kill")
	if !ok || v != 7 {
		t.Fatalf("got %d %v", v, ok)
	}
	if _, ok := ParseKeyed(strings.NewReader("oom 1\n"), "oom_kill"); ok {
		t.Fatal("want missing key")
	}
}

func writeProc(t *testing.T, root string, pid int, rssPages int, utime int) {
	t.Helper()
	dir := filepath.Join(root, itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := strings.Replace(statLine, " 37 12 ", " "+itoa(utime)+" 0 ", 1)
	must(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "statm"), []byte("9 "+itoa(rssPages)+" 0 0 0 0 0\n"), 0o644))
}

func itoa(i int) string { return strconv.Itoa(i) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type lister struct{ pids []int }

func (l *lister) Pids() ([]int, error) { return l.pids, nil }

func TestSamplerPeakAndCPU(t *testing.T) {
	root := t.TempDir()
	proc := Proc{Root: root, PageSize: 4096}
	writeProc(t, root, 10, 100, 50)
	writeProc(t, root, 11, 300, 20)
	l := &lister{pids: []int{10, 11, 99, 12}} // 99 vanished, 12 excluded
	writeProc(t, root, 12, 1_000_000, 1)
	s := NewSampler(proc, l, 12)
	got := s.Step()
	if got.RSS != 400*4096 || got.Procs != 2 {
		t.Fatalf("first sample %+v", got)
	}
	// Process 11 exits; 10 grows and burns CPU.
	l.pids = []int{10}
	writeProc(t, root, 10, 200, 150)
	got = s.Step()
	if got.RSS != 200*4096 {
		t.Fatalf("second sample %+v", got)
	}
	if s.Peak() != 400*4096 {
		t.Fatalf("peak %d", s.Peak())
	}
	// CPU: last seen of 10 (150) + last seen of 11 (20) ticks.
	if c := s.SampledCPUSeconds(); c != 1.7 {
		t.Fatalf("sampled cpu %v", c)
	}
	if s.Samples() != 2 {
		t.Fatalf("samples %d", s.Samples())
	}
}

func TestOpenAndCounters(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte("8589934592\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("5\n6\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "cpuacct.usage"), []byte("2500000000\n"), 0o644))
	cg, err := Open(V1, dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	if cg.Limit != 8<<30 {
		t.Fatalf("limit %d", cg.Limit)
	}
	if n, err := cg.OOMKills(); err != nil || n != 3 {
		t.Fatalf("oom %d %v", n, err)
	}
	if p, _ := cg.Pids(); len(p) != 2 || p[1] != 6 {
		t.Fatalf("pids %v", p)
	}
	// A batch's cgroup inside the envelope: its processes are the
	// envelope's too.
	must(t, os.MkdirAll(filepath.Join(dir, "lardon3d-x", "batch-1"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "lardon3d-x", "batch-1", "cgroup.procs"), []byte("7\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "lardon3d-x", "cgroup.procs"), []byte(""), 0o644))
	if p, _ := cg.Pids(); len(p) != 3 || p[2] != 7 {
		t.Fatalf("pids with a child cgroup %v, want 5 6 7", p)
	}
	if ns, ok := cg.CPUNanos(); !ok || ns != 2_500_000_000 {
		t.Fatalf("cpu %d %v", ns, ok)
	}
}
