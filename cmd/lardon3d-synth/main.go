package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit code.
func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c, err := parseConfig(args, getenv, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "synth: %v\n", err)
		return 2
	}
	b, err := parseBatch(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "synth: %v\n", err)
		return 2
	}
	runtime.GOMAXPROCS(b.Threads)

	total, err := memoryBytes(c, b)
	if err != nil {
		fmt.Fprintf(stderr, "synth: %v\n", err)
		return 2
	}
	if b.MemoryLimit > 0 && total > b.MemoryLimit {
		fmt.Fprintf(stderr, "synth: warning: allocating %d bytes, beyond LARDON3D_MEMORY_LIMIT=%d\n", total, b.MemoryLimit)
	}
	upFront := total
	if c.Grow {
		upFront -= c.PerItem * b.Size // memoryBytes proved the product fits
	}
	mem, err := allocate(upFront)
	if err != nil {
		fmt.Fprintf(stderr, "synth: %v\n", err)
		return 1
	}
	if c.Record != "" {
		if err := record(c.Record, b); err != nil {
			fmt.Fprintf(stderr, "synth: %v\n", err)
			return 1
		}
	}

	var cpu time.Duration
	var grown [][]byte
	if c.Progress || c.Grow {
		for i := range b.Size {
			if c.Grow {
				m, err := allocate(c.PerItem)
				if err != nil {
					fmt.Fprintf(stderr, "synth: %v\n", err)
					return 1
				}
				grown = append(grown, m)
			}
			d, err := burn(c.CPUPerItem, b.Threads)
			if err != nil {
				fmt.Fprintf(stderr, "synth: %v\n", err)
				return 1
			}
			cpu += d
			if c.Progress {
				fmt.Fprintf(stdout, "LARDON3D_PROGRESS %d/%d\n", i+1, b.Size)
			}
		}
	} else {
		cpu, err = burn(time.Duration(b.Size)*c.CPUPerItem, b.Threads)
		if err != nil {
			fmt.Fprintf(stderr, "synth: %v\n", err)
			return 1
		}
	}
	if c.Hold > 0 {
		time.Sleep(c.Hold)
	}
	rss := residentBytes()
	fmt.Fprintf(stdout, "synth: batch of %d items, %d MiB resident, %.2f CPU-s on %d threads\n",
		b.Size, rss>>20, cpu.Seconds(), b.Threads)
	runtime.KeepAlive(mem)
	runtime.KeepAlive(grown)

	switch {
	case c.FailOnItem != "":
		if b.holds(c.FailOnItem) {
			code := max(c.FailExit, 1)
			fmt.Fprintf(stderr, "synth: failing on item %s with exit %d\n", c.FailOnItem, code)
			return code
		}
	case c.FailExit != 0:
		fmt.Fprintf(stderr, "synth: failing with exit %d\n", c.FailExit)
		return c.FailExit
	}
	return 0
}

// allocate maps n bytes of anonymous memory and writes one byte per page so
// that every page is resident. The mapping is outside Go's heap.
func allocate(n int64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if n > int64(^uint(0)>>1) {
		return nil, fmt.Errorf("allocate %d bytes: too large for this platform", n)
	}
	mem, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("allocate %d bytes: %w", n, err)
	}
	page := os.Getpagesize()
	for off := 0; off < len(mem); off += page {
		mem[off] = 1
	}
	mem[len(mem)-1] = 1
	return mem, nil
}

// record appends one "TASK<TAB>ITEM" line per item of the batch, in one write.
func record(path string, b batch) error {
	var buf bytes.Buffer
	for _, it := range b.batchItems() {
		fmt.Fprintf(&buf, "%s\t%s\n", b.Task, it)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("record items: %w", err)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("record items: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("record items: %w", err)
	}
	return nil
}

// burn spends total CPU time split over threads OS threads, each measuring
// its own thread CPU clock. It returns the CPU time actually spent.
func burn(total time.Duration, threads int) (time.Duration, error) {
	if total <= 0 {
		return 0, nil
	}
	share := total / time.Duration(threads)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		spent time.Duration
		first error
	)
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := burnThread(share)
			mu.Lock()
			defer mu.Unlock()
			spent += d
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	return spent, first
}

// sink defeats dead-code elimination of the burn loop.
var sink uint64

// burnThread loops on a locked OS thread until that thread's CPU clock has
// advanced by share.
func burnThread(share time.Duration) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start, err := threadCPU()
	if err != nil {
		return 0, err
	}
	x := uint64(0x9e3779b97f4a7c15)
	for {
		for range 20000 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		now, err := threadCPU()
		if err != nil {
			return 0, err
		}
		if d := now - start; d >= share {
			sink += x & 1
			return d, nil
		}
	}
}

func threadCPU() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, fmt.Errorf("thread cpu clock: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// residentBytes returns VmRSS from /proc/self/status (0 when unknown).
func residentBytes() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	v, _ := parseVmRSS(raw)
	return v
}

// parseVmRSS extracts VmRSS (in bytes) from /proc/<pid>/status.
func parseVmRSS(status []byte) (int64, error) {
	for line := range strings.SplitSeq(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmRSS %q: %w", rest, err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("no VmRSS line")
}
