package probe

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/prometheus/procfs"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// errPSIUnavailable: the kernel exposes no pressure stall information
// (no /proc/pressure, or PSI disabled with psi=0). Not a failure.
var errPSIUnavailable = errors.New("psi not available on this kernel")

// memInfo reads MemTotal and MemAvailable in bytes. Kernels older than 3.14
// have no MemAvailable: MemFree + Buffers + Cached stands in for it.
func memInfo(p procfs.FS) (total, avail int64, err error) {
	mi, err := p.Meminfo()
	if err != nil {
		return 0, 0, fmt.Errorf("read meminfo: %w", err)
	}
	if mi.MemTotalBytes == nil {
		return 0, 0, fmt.Errorf("read meminfo: no MemTotal")
	}
	total = int64(*mi.MemTotalBytes)
	switch {
	case mi.MemAvailableBytes != nil:
		avail = int64(*mi.MemAvailableBytes)
	default:
		for _, v := range []*uint64{mi.MemFreeBytes, mi.BuffersBytes, mi.CachedBytes} {
			if v != nil {
				avail += int64(*v)
			}
		}
	}
	return total, avail, nil
}

// readPSI reads cpu, io and memory pressure. It returns errPSIUnavailable
// when any of the three files is absent or unsupported.
func readPSI(p procfs.FS) (governor.PSI, error) {
	out := governor.PSI{Available: true}
	for _, r := range []struct {
		name string
		dst  *governor.Pressure
	}{{"cpu", &out.CPU}, {"io", &out.IO}, {"memory", &out.Memory}} {
		st, err := p.PSIStatsForResource(r.name)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOTSUP) {
				return governor.PSI{}, errPSIUnavailable
			}
			return governor.PSI{}, fmt.Errorf("read %s pressure: %w", r.name, err)
		}
		*r.dst = pressure(st)
	}
	return out, nil
}

func pressure(st procfs.PSIStats) governor.Pressure {
	var p governor.Pressure
	if st.Some != nil {
		p.SomeAvg10, p.SomeAvg60, p.SomeTotal = st.Some.Avg10, st.Some.Avg60, st.Some.Total
	}
	if st.Full != nil {
		p.FullAvg10, p.FullAvg60 = st.Full.Avg10, st.Full.Avg60
	}
	return p
}

// swapTotals is swap split into ordinary devices and zram, in bytes.
type swapTotals struct {
	Total, Free, ZramTotal, ZramFree int64
}

// splitSwaps sums /proc/swaps entries (sizes in KiB), zram devices apart.
func splitSwaps(swaps []*procfs.Swap) swapTotals {
	var t swapTotals
	for _, s := range swaps {
		size, used := int64(s.Size)*1024, int64(s.Used)*1024
		free := max(size-used, 0)
		if isZram(s.Filename) {
			t.ZramTotal += size
			t.ZramFree += free
			continue
		}
		t.Total += size
		t.Free += free
	}
	return t
}

func isZram(filename string) bool {
	return strings.HasPrefix(filepath.Base(filename), "zram") && strings.HasPrefix(filename, "/dev/")
}
