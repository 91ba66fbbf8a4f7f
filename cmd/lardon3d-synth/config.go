package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// config is the parsed command line and environment.
type config struct {
	Fixed, PerItem, PerThread int64
	CPUPerItem                time.Duration
	FailExit                  int
	FailOnItem                string
	Hold                      time.Duration
	Record                    string
	// Progress prints a LARDON3D_PROGRESS line after each item's CPU.
	Progress bool
	// Grow maps each item's memory as its turn comes, before its CPU: the
	// batch's memory grows item by item instead of all up front.
	Grow bool
}

// batch is the batch environment set by the controller.
type batch struct {
	Task    string
	Size    int64
	Start   int64
	Threads int
	// Items are the lines of LARDON3D_ITEMS_FILE (nil when unset).
	Items []string
	// MemoryLimit is LARDON3D_MEMORY_LIMIT in bytes (0: unset).
	MemoryLimit int64
}

// errUsage marks errors that deserve exit code 2.
var errUsage = errors.New("usage")

// quantityValue is a flag.Value holding bytes in Kubernetes notation.
type quantityValue struct{ v *int64 }

func (q quantityValue) String() string {
	if q.v == nil {
		return "0"
	}
	return resource.NewQuantity(*q.v, resource.BinarySI).String()
}

func (q quantityValue) Set(s string) error {
	v, err := parseBytes(s)
	if err != nil {
		return err
	}
	*q.v = v
	return nil
}

func parseBytes(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w", s, err)
	}
	v, ok := q.AsInt64()
	if !ok {
		// Fractions of a byte (1.5) are rounded up; overflow is an error.
		if f := q.AsApproximateFloat64(); f >= 0 && f < math.MaxInt64/2 {
			v, ok = int64(math.Ceil(f)), true
		}
	}
	if !ok || v < 0 {
		return 0, fmt.Errorf("quantity %q: want a non-negative byte count", s)
	}
	return v, nil
}

// parseConfig reads flags, with defaults taken from LARDON3D_SYNTH_* variables.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c := config{Fixed: 300 << 20, PerItem: 60 << 20, CPUPerItem: 200 * time.Millisecond}
	fs := flag.NewFlagSet("lardon3d-synth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(quantityValue{&c.Fixed}, "fixed", "memory paid once per batch (Kubernetes quantity)")
	fs.Var(quantityValue{&c.PerItem}, "per-item", "memory per item of the batch")
	fs.Var(quantityValue{&c.PerThread}, "per-thread", "memory per thread")
	fs.DurationVar(&c.CPUPerItem, "cpu-per-item", c.CPUPerItem, "CPU time burned per item")
	fs.IntVar(&c.FailExit, "fail-exit", 0, "exit code: always when non-zero, or on --fail-on-item")
	fs.StringVar(&c.FailOnItem, "fail-on-item", "", "fail only when the batch holds this item (a line of the items file or a 0-based index)")
	fs.DurationVar(&c.Hold, "hold", 0, "keep the memory resident this long after burning")
	fs.StringVar(&c.Record, "record", "", "append TASK<TAB>ITEM per item started to this file")
	fs.BoolVar(&c.Progress, "progress", false, "burn the CPU item by item and print \"LARDON3D_PROGRESS n\" after each")
	fs.BoolVar(&c.Grow, "grow", false, "map each item's memory when its turn comes (item by item), not all up front")

	// Environment first, so that flags on the command line win.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "LARDON3D_SYNTH_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%w: %s: %w", errUsage, name, err)
			}
		}
	})
	if envErr != nil {
		return config{}, envErr
	}
	if err := fs.Parse(args); err != nil {
		return config{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if c.CPUPerItem < 0 || c.Hold < 0 {
		return config{}, fmt.Errorf("%w: durations must not be negative", errUsage)
	}
	if c.FailExit < 0 || c.FailExit > 255 {
		return config{}, fmt.Errorf("%w: --fail-exit must be in [0, 255], got %d", errUsage, c.FailExit)
	}
	return c, nil
}

// parseBatch reads the batch environment.
func parseBatch(getenv func(string) string) (batch, error) {
	b := batch{Task: getenv("LARDON3D_TASK"), Threads: 1}
	if path := getenv("LARDON3D_ITEMS_FILE"); path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return batch{}, fmt.Errorf("read items file: %w", err)
		}
		b.Items = parseItems(raw)
	}
	var err error
	if b.Size, err = envInt(getenv, "LARDON3D_BATCH_SIZE", int64(max(len(b.Items), 1)), 1); err != nil {
		return batch{}, err
	}
	if b.Start, err = envInt(getenv, "LARDON3D_BATCH_START", 0, 0); err != nil {
		return batch{}, err
	}
	threads, err := envInt(getenv, "LARDON3D_THREADS", 1, 1)
	if err != nil {
		return batch{}, err
	}
	if threads > 4096 {
		return batch{}, fmt.Errorf("%w: LARDON3D_THREADS=%d: at most 4096", errUsage, threads)
	}
	b.Threads = int(threads)
	if b.MemoryLimit, err = envInt(getenv, "LARDON3D_MEMORY_LIMIT", 0, 0); err != nil {
		return batch{}, err
	}
	return b, nil
}

// parseItems splits an items file into its non-empty lines.
func parseItems(raw []byte) []string {
	items := []string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := strings.TrimRight(sc.Text(), "\r"); line != "" {
			items = append(items, line)
		}
	}
	return items
}

func envInt(getenv func(string) string, name string, def, least int64) (int64, error) {
	s := getenv(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < least {
		return 0, fmt.Errorf("%w: %s=%q: want an integer >= %d", errUsage, name, s, least)
	}
	return v, nil
}

// batchItems names the batch's items: the items file's lines, else the
// global indexes from LARDON3D_BATCH_START.
func (b batch) batchItems() []string {
	if b.Items != nil {
		return b.Items
	}
	out := make([]string, 0, min(b.Size, 1<<20))
	for i := int64(0); i < b.Size && i < 1<<20; i++ {
		out = append(out, strconv.FormatInt(b.Start+i, 10))
	}
	return out
}

// holds reports whether the batch holds item k (a line of the items file,
// or a global index in [Start, Start+Size)).
func (b batch) holds(k string) bool {
	for _, it := range b.Items {
		if it == k {
			return true
		}
	}
	if i, err := strconv.ParseInt(k, 10, 64); err == nil {
		return i >= b.Start && i-b.Start < b.Size
	}
	return false
}

// memoryBytes is fixed + perItem×size + perThread×threads, overflow-checked.
func memoryBytes(c config, b batch) (int64, error) {
	items, ok1 := mulInt64(c.PerItem, b.Size)
	threads, ok2 := mulInt64(c.PerThread, int64(b.Threads))
	sum, ok3 := addInt64(c.Fixed, items)
	total, ok4 := addInt64(sum, threads)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, fmt.Errorf("%w: memory demand overflows int64", errUsage)
	}
	return total, nil
}

func mulInt64(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	if a < 0 || b < 0 || a > math.MaxInt64/b {
		return 0, false
	}
	return a * b, true
}

func addInt64(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return 0, false
	}
	return a + b, true
}
