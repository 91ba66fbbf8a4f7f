package governor

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"
)

var update = flag.Bool("update", false, "rewrite the scenario files with the actual output")

// TestScenarios runs the scripts of testdata/scenarios: blocks of one
// command, a "----" line and the expected output, separated by blank lines;
// lines starting with # are comments. go test -update rewrites the expected
// output. The commands:
//
//	new [margin=Q capacity=Q cpus-reserved=N io-slots=N gpu-slots=N gpu-margin=Q
//	     gpu-memory=Q gpu-unified=true load-threshold=F io-threshold=F hysteresis=D
//	     cpu-gate-max-wait=D]
//	snapshot mem=Q [avail=Q cpus=N cgroup=Q cgusage=Q work=Q load=F psi-io=F psi-cpu=F
//	     swap=Q zram=Q gpu=ID:TOTAL:FREE[:unified|:unknown]... scratch=PATH:FREE[:rot]...]
//	decide|reserve name=X [fixed=Q perItem=Q perThread=Q gpuFixed=Q gpuPerItem=Q
//	     batch=MIN..MAX threads=N minThreads=N io=N gpuSlots=N scratch=Q
//	     next=true (Estimate.Continues: a task's next batch)]
//	release NAME
//	tick DURATION
//	record class=C items=N threads=N peak=Q dur=D [exit=N]
//	history CLASS
//	budgets
//	close
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

type block struct {
	comments []string
	cmd      string
	want     []string
}

func parseScenario(t *testing.T, path string) []block {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var cur block
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "#"):
			cur.comments = append(cur.comments, l)
		case strings.TrimSpace(l) == "":
		default:
			cur.cmd = l
			if !sc.Scan() || sc.Text() != "----" {
				t.Fatalf("%s:%d: command without ---- line", path, line)
			}
			line++
			for sc.Scan() {
				line++
				if strings.TrimSpace(sc.Text()) == "" {
					break
				}
				cur.want = append(cur.want, sc.Text())
			}
			blocks = append(blocks, cur)
			cur = block{}
		}
	}
	if len(cur.comments) > 0 {
		blocks = append(blocks, cur)
	}
	return blocks
}

func runScenario(t *testing.T, path string) {
	blocks := parseScenario(t, path)
	s := &scenario{t: t, clk: clocktesting.NewFakePassiveClock(epoch), res: map[string]Reservation{}}
	s.g = New(Config{}, WithClock(s.clk))
	var out strings.Builder
	failed := false
	for i, b := range blocks {
		for _, c := range b.comments {
			out.WriteString(c + "\n")
		}
		if b.cmd == "" {
			continue
		}
		got := s.run(b.cmd)
		fmt.Fprintf(&out, "%s\n----\n%s\n", b.cmd, strings.Join(got, "\n"))
		if i < len(blocks)-1 {
			out.WriteString("\n")
		}
		if !*update && strings.Join(got, "\n") != strings.Join(b.want, "\n") {
			failed = true
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", path, b.cmd, strings.Join(got, "\n"), strings.Join(b.want, "\n"))
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	} else if failed {
		t.Log("run go test -run TestScenarios -update to rewrite the expected output")
	}
}

type scenario struct {
	t   *testing.T
	g   *Governor
	clk *clocktesting.FakePassiveClock
	res map[string]Reservation
}

func (s *scenario) run(cmd string) []string {
	fields := strings.Fields(cmd)
	verb, args := fields[0], fields[1:]
	kv := map[string][]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		kv[k] = append(kv[k], v)
	}
	switch verb {
	case "new":
		s.g = New(s.config(kv), WithClock(s.clk))
		s.res = map[string]Reservation{}
		return []string{"ok"}
	case "snapshot":
		s.g.Update(s.snapshot(kv))
		return s.state()
	case "decide", "reserve":
		e := s.estimate(kv)
		name := s.str(kv, "name", "?")
		if verb == "decide" {
			return append([]string{s.g.Decide(e).String()}, s.state()...)
		}
		d, r, ok := s.g.Reserve(e)
		lines := []string{d.String()}
		if ok {
			s.res[name] = r
			c := r.Contract()
			lines = append(lines, fmt.Sprintf("%s: batch=%d/%d threads=%d mem=%s gpu=%s%s io=%d gpuSlots=%d scratch=%s%s gen=%d",
				name, c.Batch, c.BatchRequested, c.Threads, FormatBytes(c.MemoryBytes), FormatBytes(c.GPUMemoryBytes),
				prefixed("@", c.GPUID), c.IOSlots, c.GPUSlots, FormatBytes(c.ScratchBytes), prefixed("@", leaseNonce.ReplaceAllString(c.ScratchDir, "-NONCE")), c.Generation))
		}
		return append(lines, s.state()...)
	case "release":
		r, ok := s.res[args[0]]
		if !ok {
			return []string{"no reservation named " + args[0]}
		}
		res := "released " + args[0]
		if err := s.g.Release(r); err != nil {
			res = "error: " + err.Error()
		}
		return append([]string{res}, s.state()...)
	case "tick":
		d, err := time.ParseDuration(args[0])
		if err != nil {
			s.t.Fatal(err)
		}
		s.clk.SetTime(s.clk.Now().Add(d))
		return s.state()
	case "budgets":
		v := s.g.Budgets()
		return append(s.state(), fmt.Sprintf("signals: load=%.2f/%.2f psi-io=%.1f/%.1f swap=%s/%s zram=%s/%s next-id=%d",
			v.Load1, v.LoadThreshold, v.PSI.IO.SomeAvg10, v.IOPressureThreshold,
			FormatBytes(v.SwapFree), FormatBytes(v.SwapTotal), FormatBytes(v.ZramFree), FormatBytes(v.ZramTotal), v.NextID))
	case "close":
		res := "closed"
		if err := s.g.Close(); err != nil {
			res = "error: " + err.Error()
		}
		return append([]string{res}, s.state()...)
	}
	s.t.Fatalf("unknown command %q", verb)
	return nil
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// state prints the governor's budgets after a step.
func (s *scenario) state() []string {
	v := s.g.Budgets()
	m := v.Memory
	lines := []string{
		fmt.Sprintf("mem: cap=%s margin=%s reserved=%s free=%s avail=%s",
			FormatBytes(m.Capacity), FormatBytes(m.Margin), FormatBytes(m.Reserved), FormatBytes(m.Free), FormatBytes(v.MemAvailable)),
		fmt.Sprintf("cpu: %d/%d threads (%d reserved); io: %d/%d; gpu-slots: %d/%d; active=%d gen=%d",
			v.CPU.Reserved, v.CPU.Capacity-v.CPU.Margin, v.CPU.Margin, v.IOSlots.Reserved, v.IOSlots.Capacity,
			v.GPUSlots.Reserved, v.GPUSlots.Capacity, v.Reservations, v.Generation),
	}
	for _, g := range v.GPUs {
		kind := "dedicated"
		switch {
		case g.Unified:
			kind = "unified"
		case !g.Known:
			kind = "unknown"
		}
		lines = append(lines, fmt.Sprintf("gpu %s: %s present=%v cap=%s margin=%s reserved=%s free=%s",
			g.ID, kind, g.Present, FormatBytes(g.Memory.Capacity), FormatBytes(g.Memory.Margin),
			FormatBytes(g.Memory.Reserved), FormatBytes(g.Memory.Free)))
	}
	for _, sc := range v.Scratch {
		lines = append(lines, fmt.Sprintf("scratch %s: present=%v rotational=%v reserved=%s free=%s leases=%d",
			sc.Path, sc.Present, sc.Rotational, FormatBytes(sc.Bytes.Reserved), FormatBytes(sc.Bytes.Free), sc.Leases))
	}
	if v.LoadDeferred || v.IODeferred || v.Closed {
		lines = append(lines, fmt.Sprintf("deferred: load=%v io=%v closed=%v", v.LoadDeferred, v.IODeferred, v.Closed))
	}
	return lines
}

func (s *scenario) str(kv map[string][]string, k, def string) string {
	if v, ok := kv[k]; ok {
		return v[0]
	}
	return def
}

func (s *scenario) qty(kv map[string][]string, k string, def int64) int64 {
	v, ok := kv[k]
	if !ok {
		return def
	}
	return s.parseQty(v[0])
}

func (s *scenario) parseQty(v string) int64 {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		s.t.Fatalf("quantity %q: %v", v, err)
	}
	return q.Value()
}

func (s *scenario) num(kv map[string][]string, k string, def int64) int64 {
	v, ok := kv[k]
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil {
		s.t.Fatalf("%s=%q: %v", k, v[0], err)
	}
	return n
}

func (s *scenario) float(kv map[string][]string, k string) float64 {
	v, ok := kv[k]
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(v[0], 64)
	if err != nil {
		s.t.Fatalf("%s=%q: %v", k, v[0], err)
	}
	return f
}

func (s *scenario) config(kv map[string][]string) Config {
	h, _ := time.ParseDuration(s.str(kv, "hysteresis", "0s"))
	maxWait, _ := time.ParseDuration(s.str(kv, "cpu-gate-max-wait", "0s"))
	return Config{
		MemoryReserved: s.qty(kv, "margin", 0), MemoryCapacity: s.qty(kv, "capacity", 0),
		CPUsReserved: int(s.num(kv, "cpus-reserved", 0)), IOSlots: int(s.num(kv, "io-slots", 0)),
		GPUSlots: int(s.num(kv, "gpu-slots", 0)), GPUMemoryMargin: s.qty(kv, "gpu-margin", 0),
		GPUMemory: s.qty(kv, "gpu-memory", 0), GPUUnified: s.str(kv, "gpu-unified", "") == "true",
		LoadThreshold: s.float(kv, "load-threshold"), IOPressureThreshold: s.float(kv, "io-threshold"),
		Hysteresis: h, CPUGateMaxWait: maxWait,
	}
}

func (s *scenario) snapshot(kv map[string][]string) Snapshot {
	sn := Snapshot{
		Taken: s.clk.Now(), MemTotal: s.qty(kv, "mem", 0), CPUs: int(s.num(kv, "cpus", 1)),
		CgroupMemoryLimit: s.qty(kv, "cgroup", 0), CgroupMemoryUsage: s.qty(kv, "cgusage", 0),
		WorkMemoryUsage: s.qty(kv, "work", 0), Load1: s.float(kv, "load"),
		SwapTotal: s.qty(kv, "swap", 0), ZramTotal: s.qty(kv, "zram", 0),
	}
	sn.MemAvailable = s.qty(kv, "avail", sn.MemTotal)
	sn.SwapFree, sn.ZramFree = sn.SwapTotal, sn.ZramTotal
	if _, ok := kv["psi-io"]; ok {
		sn.PSI = PSI{Available: true, IO: Pressure{SomeAvg10: s.float(kv, "psi-io")}}
	}
	if _, ok := kv["psi-cpu"]; ok {
		sn.PSI.Available, sn.PSI.CPU = true, Pressure{SomeAvg10: s.float(kv, "psi-cpu")}
	}
	for _, v := range kv["gpu"] {
		p := strings.Split(v, ":")
		g := GPU{ID: p[0], Name: "gpu" + p[0], Known: true}
		if len(p) >= 3 {
			g.TotalBytes, g.FreeBytes = s.parseQty(p[1]), s.parseQty(p[2])
		}
		for _, f := range p[1:] {
			switch f {
			case "unified":
				g.Unified = true
			case "unknown":
				g.Known = false
			}
		}
		sn.GPUs = append(sn.GPUs, g)
	}
	for _, v := range kv["scratch"] {
		p := strings.Split(v, ":")
		sn.Scratch = append(sn.Scratch, ScratchVolume{Path: p[0], FreeBytes: s.parseQty(p[1]), Rotational: len(p) > 2 && p[2] == "rot"})
	}
	return sn
}

func (s *scenario) estimate(kv map[string][]string) Estimate {
	e := Estimate{
		Class: s.str(kv, "class", ""), FixedMemory: s.qty(kv, "fixed", 0), PerItemMemory: s.qty(kv, "perItem", 0),
		PerThreadMemory: s.qty(kv, "perThread", 0), FixedGPUMemory: s.qty(kv, "gpuFixed", 0),
		PerItemGPUMemory: s.qty(kv, "gpuPerItem", 0), Threads: int(s.num(kv, "threads", 1)),
		MinThreads: int(s.num(kv, "minThreads", 1)), IOSlots: int(s.num(kv, "io", 0)),
		GPUSlots: int(s.num(kv, "gpuSlots", 0)), ScratchBytes: s.qty(kv, "scratch", 0),
		Continues: s.str(kv, "next", "") == "true",
	}
	lo, hi, _ := strings.Cut(s.str(kv, "batch", "1..1"), "..")
	var err1, err2 error
	e.BatchMin, err1 = strconv.ParseInt(lo, 10, 64)
	e.BatchMax, err2 = strconv.ParseInt(hi, 10, 64)
	if err1 != nil || err2 != nil {
		s.t.Fatalf("batch=%s", s.str(kv, "batch", ""))
	}
	return e
}

// leaseNonce is the random end of a lease directory's name, which the
// scenarios' expected output does not spell.
var leaseNonce = regexp.MustCompile(`-[0-9a-f]{16}$`)
