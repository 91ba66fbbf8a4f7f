package probe

import (
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/procfs"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

func TestParseProcCgroup(t *testing.T) {
	in := "12:pids:/docker/a\n4:cpu,cpuacct:/docker/a\n1:name=systemd:/\n0::/user.slice/x\n\n"
	got, err := parseProcCgroup(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []cgroupEntry{
		{ID: 12, Controllers: []string{"pids"}, Path: "/docker/a"},
		{ID: 4, Controllers: []string{"cpu", "cpuacct"}, Path: "/docker/a"},
		{ID: 1, Controllers: []string{"name=systemd"}, Path: "/"},
		{ID: 0, Path: "/user.slice/x"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"x:memory:/", "4:memory"} {
		if _, err := parseProcCgroup(strings.NewReader(bad)); err == nil {
			t.Errorf("parseProcCgroup(%q): want an error", bad)
		}
	}
}

func TestParseCgroupBytes(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"max\n", 0, false},
		{"9223372036854771712\n", 0, false}, // v1 "no limit"
		{"4611686018427387904", 0, false},   // 2^62: no limit
		{"2147483648\n", 2147483648, false},
		{"0", 0, false},
		{"-1", 0, true},
		{"lots", 0, true},
		{"", 0, true},
	} {
		got, err := parseCgroupBytes(strings.NewReader(tc.in))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseCgroupBytes(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseCPUMax(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    float64
		wantErr bool
	}{
		{"max 100000\n", 0, false},
		{"max", 0, false},
		{"50000 100000\n", 0.5, false},
		{"250000 100000", 2.5, false},
		{"200000", 2, false},
		{"a 100000", 0, true},
		{"1 2 3", 0, true},
		{"", 0, true},
	} {
		got, err := parseCPUMax(strings.NewReader(tc.in))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseCPUMax(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestCPUsFromQuota(t *testing.T) {
	for _, tc := range []struct {
		aff   int
		quota float64
		want  int
	}{{8, 0, 8}, {8, 1.5, 2}, {8, 0.5, 1}, {2, 4, 2}, {0, 0, 1}, {4, 3.0, 3}} {
		if got := cpusFromQuota(tc.aff, tc.quota); got != tc.want {
			t.Errorf("cpusFromQuota(%d, %v) = %d, want %d", tc.aff, tc.quota, got, tc.want)
		}
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	in := "0, GPU-a, NVIDIA GeForce RTX 3090, 24576, 1024, 23552, 37\n" +
		"1, GPU-b, \"Tesla, quoted\", 16, 20, [N/A], 100\n" + // used > total clamps at 0 free
		"2, GPU-c, NVIDIA Jetson, [N/A], [N/A], [N/A], [N/A]\n" +
		"3, GPU-d, T4, 15360, [Not Supported], 15000, [Not Supported]\n" +
		"4, GPU-e, H200, 143771, 100, 143000, 0\n" // free as the driver says, not total − used
	got, err := parseNvidiaSMI(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []GPUDevice{
		{ID: "nvidia:0", UUID: "GPU-a", Name: "NVIDIA GeForce RTX 3090", Known: true, TotalBytes: 24576 * mib, UsedBytes: 1024 * mib, FreeBytes: 23552 * mib, Utilization: 37},
		{ID: "nvidia:1", UUID: "GPU-b", Name: "Tesla, quoted", Known: true, TotalBytes: 16 * mib, UsedBytes: 20 * mib, FreeBytes: 0, Utilization: 100},
		{ID: "nvidia:2", UUID: "GPU-c", Name: "NVIDIA Jetson", Utilization: -1},
		{ID: "nvidia:3", UUID: "GPU-d", Name: "T4", Utilization: -1},
		{ID: "nvidia:4", UUID: "GPU-e", Name: "H200", Known: true, TotalBytes: 143771 * mib, UsedBytes: 100 * mib, FreeBytes: 143000 * mib, Utilization: 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if g := got[0].budgetGPU(); g != (governor.GPU{ID: "nvidia:0", Name: "NVIDIA GeForce RTX 3090", Known: true, TotalBytes: 24576 * mib, FreeBytes: 23552 * mib}) {
		t.Errorf("budget view %+v", g)
	}
	if got, err := parseNvidiaSMI(strings.NewReader("")); err != nil || len(got) != 0 {
		t.Errorf("empty output: got %v, %v; want no GPU, no error", got, err)
	}
	for _, bad := range []string{
		"0, x, 12\n", // the old query's columns
		"0, u, x, twelve, 1, 1, 0\n", "0, u, x, -5, 1, 1, 0\n", "0, u, x, 99999999999999999, 1, 1, 0\n",
		"0, u, x, 12, 1, eleven, 0\n", "zero, u, x, 12, 1, 11, 0\n",
	} {
		if _, err := parseNvidiaSMI(strings.NewReader(bad)); err == nil {
			t.Errorf("parseNvidiaSMI(%q): want an error", bad)
		}
	}
}

func TestParseNvidiaApps(t *testing.T) {
	in := "GPU-a, 4242, 512\n" +
		"GPU-a, 4343, [N/A]\n" +
		"GPU-b, 17, 0\n"
	got, err := parseNvidiaApps(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []nvidiaApp{
		{"GPU-a", GPUProcess{PID: 4242, Bytes: 512 * mib, Known: true}},
		{"GPU-a", GPUProcess{PID: 4343}},
		{"GPU-b", GPUProcess{PID: 17, Known: true}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	for _, none := range []string{"", "No running processes found\n"} {
		if got, err := parseNvidiaApps(strings.NewReader(none)); err != nil || len(got) != 0 {
			t.Errorf("parseNvidiaApps(%q) = %v, %v; want no process", none, got, err)
		}
	}
	for _, bad := range []string{"GPU-a, 12\n", "GPU-a, x, 12\n", "GPU-a, -3, 12\n", "GPU-a, 0, 12\n", "GPU-a, 12, twelve\n", "GPU-a, 12, 5, 6\n"} {
		if _, err := parseNvidiaApps(strings.NewReader(bad)); err == nil {
			t.Errorf("parseNvidiaApps(%q): want an error", bad)
		}
	}
}

// FuzzParseNvidia: neither parser panics on any output, and what they
// accept is consistent: known memory never negative, free never above total.
func FuzzParseNvidia(f *testing.F) {
	for _, seed := range []string{
		"0, GPU-a, NVIDIA GeForce RTX 3090, 24576, 1024, 23552, 37\n",
		"2, GPU-c, NVIDIA Jetson, [N/A], [N/A], [N/A], [N/A]\n",
		"GPU-a, 4242, 512\nGPU-a, 4343, [N/A]\n",
		"No running processes found\n",
		"1, GPU-b, \"Tesla, \"\"quoted\"\"\", 16, 20, 30, 100\n",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if devs, err := parseNvidiaSMI(strings.NewReader(in)); err == nil {
			for _, d := range devs {
				if d.TotalBytes < 0 || d.UsedBytes < 0 || d.FreeBytes < 0 || d.FreeBytes > d.TotalBytes || d.Utilization < -1 || d.Utilization > 100 {
					t.Fatalf("device %+v from %q", d, in)
				}
			}
		}
		if apps, err := parseNvidiaApps(strings.NewReader(in)); err == nil {
			for _, a := range apps {
				if a.PID <= 0 || a.Bytes < 0 || (!a.Known && a.Bytes != 0) {
					t.Fatalf("process %+v from %q", a, in)
				}
			}
		}
	})
}

func TestParseRotational(t *testing.T) {
	for in, want := range map[string]bool{"0\n": false, "1\n": true} {
		got, err := parseRotational(strings.NewReader(in))
		if err != nil || got != want {
			t.Errorf("parseRotational(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseRotational(strings.NewReader("2")); err == nil {
		t.Error("parseRotational(2): want an error")
	}
}

func TestSplitSwaps(t *testing.T) {
	got := splitSwaps([]*procfs.Swap{
		{Filename: "/dev/zram0", Size: 100, Used: 40},
		{Filename: "/swapfile", Size: 1000, Used: 10},
		{Filename: "/dev/sda2", Size: 50, Used: 60}, // used > size: free clamps to 0
		{Filename: "/zramfile", Size: 7, Used: 0},   // a file named zram is not zram
	})
	want := swapTotals{Total: 1057 * 1024, Free: 997 * 1024, ZramTotal: 100 * 1024, ZramFree: 60 * 1024}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
