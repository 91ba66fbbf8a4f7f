package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseConfig(t *testing.T) {
	c, err := parseConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config{Fixed: 300 << 20, PerItem: 60 << 20, CPUPerItem: 200 * time.Millisecond}
	if c != want {
		t.Fatalf("defaults: got %+v, want %+v", c, want)
	}

	c, err = parseConfig(
		[]string{"--fixed", "1Gi", "--per-item=1.5k", "--cpu-per-item", "0s", "--fail-exit", "3", "--hold", "1s"},
		env(map[string]string{"LARDON3D_SYNTH_PER_THREAD": "90Mi", "LARDON3D_SYNTH_FIXED": "5Mi", "LARDON3D_SYNTH_FAIL_ON_ITEM": "img7.jpg"}),
		io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = config{Fixed: 1 << 30, PerItem: 1500, PerThread: 90 << 20, FailExit: 3, FailOnItem: "img7.jpg", Hold: time.Second}
	if c != want {
		t.Fatalf("flags and env: got %+v, want %+v", c, want)
	}

	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"--fixed", "lots"}},
		{args: []string{"--fixed", "-1Mi"}},
		{args: []string{"--fail-exit", "256"}},
		{args: []string{"--cpu-per-item", "-1s"}},
		{args: []string{"extra"}},
		{args: []string{"--nope"}},
		{env: map[string]string{"LARDON3D_SYNTH_PER_ITEM": "x"}},
	} {
		if _, err := parseConfig(tc.args, env(tc.env), io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("parseConfig(%q, %v) = %v, want a usage error", tc.args, tc.env, err)
		}
	}
}

func TestParseBatch(t *testing.T) {
	items := filepath.Join(t.TempDir(), "items")
	if err := os.WriteFile(items, []byte("a.jpg\nb.jpg\r\n\nc.jpg"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := parseBatch(env(map[string]string{"LARDON3D_ITEMS_FILE": items, "LARDON3D_THREADS": "3", "LARDON3D_TASK": "t", "LARDON3D_BATCH_START": "10"}))
	if err != nil {
		t.Fatal(err)
	}
	want := batch{Task: "t", Size: 3, Start: 10, Threads: 3, Items: []string{"a.jpg", "b.jpg", "c.jpg"}}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("got %+v, want %+v", b, want)
	}
	if !b.holds("b.jpg") || !b.holds("12") || b.holds("13") || b.holds("9") || b.holds("z.jpg") {
		t.Error("holds: wrong membership")
	}

	b, err = parseBatch(env(map[string]string{"LARDON3D_BATCH_SIZE": "2", "LARDON3D_BATCH_START": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.batchItems(); !reflect.DeepEqual(got, []string{"5", "6"}) {
		t.Errorf("batchItems without a file = %q, want [5 6]", got)
	}
	if b, _ := parseBatch(env(nil)); b.Size != 1 || b.Threads != 1 {
		t.Errorf("empty environment: got %+v, want size 1, 1 thread", b)
	}

	for _, e := range []map[string]string{
		{"LARDON3D_BATCH_SIZE": "0"},
		{"LARDON3D_THREADS": "two"},
		{"LARDON3D_THREADS": "5000"},
		{"LARDON3D_BATCH_START": "-1"},
		{"LARDON3D_ITEMS_FILE": filepath.Join(t.TempDir(), "missing")},
	} {
		if _, err := parseBatch(env(e)); err == nil {
			t.Errorf("parseBatch(%v): want an error", e)
		}
	}
}

func TestMemoryBytes(t *testing.T) {
	got, err := memoryBytes(config{Fixed: 64 << 20, PerItem: 16 << 20, PerThread: 1 << 20}, batch{Size: 4, Threads: 2})
	if err != nil || got != (64+64+2)<<20 {
		t.Fatalf("got %d, %v; want %d", got, err, (64+64+2)<<20)
	}
	if _, err := memoryBytes(config{PerItem: 1 << 40}, batch{Size: 1 << 30, Threads: 1}); err == nil {
		t.Fatal("overflow: want an error")
	}
	if _, err := memoryBytes(config{Fixed: 1 << 62, PerThread: 1 << 61}, batch{Size: 1, Threads: 2}); err == nil {
		t.Fatal("overflow on the sum: want an error")
	}
}

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS([]byte("Name:\tsynth\nVmPeak:\t  9 kB\nVmRSS:\t  134728 kB\nThreads: 3\n"))
	if err != nil || got != 134728<<10 {
		t.Fatalf("got %d, %v", got, err)
	}
	if _, err := parseVmRSS([]byte("Name: x\n")); err == nil {
		t.Fatal("no VmRSS: want an error")
	}
}
