package probe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// v1Unlimited is the threshold at and above which a cgroup v1 byte value
// means "no limit" (the kernel reports PAGE_COUNTER_MAX rounded to a page,
// e.g. 9223372036854771712).
const v1Unlimited = int64(1) << 62

// cgroupEntry is one line of /proc/<pid>/cgroup.
type cgroupEntry struct {
	// ID is the hierarchy ID (0 for cgroup v2).
	ID int
	// Controllers of a v1 hierarchy ("memory", "cpu", "cpuacct", ...); empty for v2.
	Controllers []string
	// Path of the cgroup inside its hierarchy, starting with "/".
	Path string
}

// parseProcCgroup parses /proc/<pid>/cgroup: "ID:controllers:path" per line.
func parseProcCgroup(r io.Reader) ([]cgroupEntry, error) {
	var out []cgroupEntry
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("parse cgroup line %q: want 3 fields separated by ':'", line)
		}
		id, err := strconv.Atoi(parts[0])
		if err != nil {
			return nil, fmt.Errorf("parse cgroup line %q: hierarchy id: %w", line, err)
		}
		e := cgroupEntry{ID: id, Path: parts[2]}
		if parts[1] != "" {
			e.Controllers = strings.Split(parts[1], ",")
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read cgroup membership: %w", err)
	}
	return out, nil
}

// parseCgroupBytes parses a memory limit or usage file of either version:
// "max" (v2) or a value >= 2^62 (v1) mean no limit and give 0.
func parseCgroupBytes(r io.Reader) (int64, error) {
	s, err := readTrimmed(r)
	if err != nil {
		return 0, err
	}
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse cgroup bytes %q: %w", s, err)
	}
	if v >= uint64(v1Unlimited) {
		return 0, nil
	}
	return int64(v), nil
}

// parseCgroupInt parses a file holding one signed integer (cfs_quota_us, cfs_period_us).
func parseCgroupInt(r io.Reader) (int64, error) {
	s, err := readTrimmed(r)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse cgroup integer %q: %w", s, err)
	}
	return v, nil
}

// parseCPUMax parses cgroup v2 cpu.max ("max 100000" or "50000 100000") into
// a quota in cores; 0 means no quota.
func parseCPUMax(r io.Reader) (float64, error) {
	s, err := readTrimmed(r)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return 0, fmt.Errorf("parse cpu.max %q: want \"QUOTA [PERIOD]\"", s)
	}
	if f[0] == "max" {
		return 0, nil
	}
	quota, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse cpu.max quota %q: %w", f[0], err)
	}
	period := int64(100000)
	if len(f) == 2 {
		if period, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return 0, fmt.Errorf("parse cpu.max period %q: %w", f[1], err)
		}
	}
	return cpuQuota(quota, period), nil
}

// cpuQuota returns quota/period in cores, or 0 for no quota (negative or zero values).
func cpuQuota(quota, period int64) float64 {
	if quota <= 0 || period <= 0 {
		return 0
	}
	return float64(quota) / float64(period)
}

func readTrimmed(r io.Reader) (string, error) {
	var buf [128]byte
	n, err := io.ReadFull(r, buf[:])
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", fmt.Errorf("read cgroup value: %w", err)
	}
	return string(bytes.TrimSpace(buf[:n])), nil
}

// cgroupVersion tells which file layout a controller uses.
type cgroupVersion int

const (
	cgroupNone cgroupVersion = iota
	cgroupV1
	cgroupV2
)

// String returns "none", "v1" or "v2".
func (v cgroupVersion) String() string {
	switch v {
	case cgroupV1:
		return "v1"
	case cgroupV2:
		return "v2"
	}
	return "none"
}

// cgroupPaths is what discovery found, once: for memory and cpu, the version
// and the directories from the controller's cgroup up to the hierarchy root.
type cgroupPaths struct {
	memVersion cgroupVersion
	memDirs    []string
	cpuVersion cgroupVersion
	cpuDirs    []string
}

// discoverCgroups maps the entries of /proc/self/cgroup onto directories
// under root. A v1 line carrying the controller wins over the v2 line.
func discoverCgroups(entries []cgroupEntry, root string) cgroupPaths {
	var p cgroupPaths
	p.memVersion, p.memDirs = discoverController(entries, root, "memory")
	p.cpuVersion, p.cpuDirs = discoverController(entries, root, "cpu")
	return p
}

func discoverController(entries []cgroupEntry, root, controller string) (cgroupVersion, []string) {
	for _, e := range entries {
		for _, c := range e.Controllers {
			if c != controller {
				continue
			}
			// The mount is named after the joined controllers ("cpu,cpuacct")
			// with the single names often symlinked to it.
			base := filepath.Join(root, strings.Join(e.Controllers, ","))
			if !isDir(base) {
				base = filepath.Join(root, controller)
			}
			if !isDir(base) {
				return cgroupNone, nil
			}
			return cgroupV1, levels(base, e.Path)
		}
	}
	for _, e := range entries {
		if e.ID == 0 && len(e.Controllers) == 0 {
			if !isDir(root) {
				return cgroupNone, nil
			}
			return cgroupV2, levels(root, e.Path)
		}
	}
	return cgroupNone, nil
}

// levels lists base/path, its parents, up to base. When base/path does not
// exist (a cgroup namespace or bind mount showing only our own cgroup at the
// root), base alone is used.
func levels(base, path string) []string {
	rel := filepath.Clean("/" + path)
	leaf := filepath.Join(base, rel)
	if rel == "/" || !isDir(leaf) {
		return []string{base}
	}
	var out []string
	for d := leaf; ; d = filepath.Dir(d) {
		out = append(out, d)
		if d == base || len(d) <= len(base) {
			break
		}
	}
	return out
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// cgroupMemory reads the smallest memory limit along dirs and the usage of
// the cgroup carrying it; (0, 0) when no level has a limit.
func cgroupMemory(version cgroupVersion, dirs []string) (limit, usage int64, err error) {
	limit, usage, _, err = cgroupMemoryAt(version, dirs)
	return limit, usage, err
}

// cgroupMemoryAt is cgroupMemory with the directory carrying the limit
// ("" when none).
func cgroupMemoryAt(version cgroupVersion, dirs []string) (limit, usage int64, at string, err error) {
	limitFile, usageFile := "memory.max", "memory.current"
	if version == cgroupV1 {
		limitFile, usageFile = "memory.limit_in_bytes", "memory.usage_in_bytes"
	}
	for _, d := range dirs {
		l, err := readFileWith(filepath.Join(d, limitFile), parseCgroupBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, 0, "", err
		}
		if l > 0 && (limit == 0 || l < limit) {
			limit, at = l, d
		}
	}
	if limit == 0 {
		return 0, 0, "", nil
	}
	usage, err = readFileWith(filepath.Join(at, usageFile), parseCgroupBytes)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, "", err
	}
	return limit, usage, at, nil
}

// cgroupCPUQuota reads the smallest CPU quota (in cores) along dirs; 0 when none.
func cgroupCPUQuota(version cgroupVersion, dirs []string) (float64, error) {
	var quota float64
	for _, d := range dirs {
		var q float64
		switch version {
		case cgroupV2:
			v, err := readFileWith(filepath.Join(d, "cpu.max"), parseCPUMax)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			q = v
		case cgroupV1:
			qu, err := readFileWith(filepath.Join(d, "cpu.cfs_quota_us"), parseCgroupInt)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			if qu <= 0 {
				continue
			}
			pe, err := readFileWith(filepath.Join(d, "cpu.cfs_period_us"), parseCgroupInt)
			if err != nil {
				return 0, err
			}
			q = cpuQuota(qu, pe)
		default:
			return 0, nil
		}
		if q > 0 && (quota == 0 || q < quota) {
			quota = q
		}
	}
	return quota, nil
}

// cpusFromQuota bounds the affinity count by the quota rounded up, at least 1.
func cpusFromQuota(affinity int, quota float64) int {
	n := affinity
	if quota > 0 {
		if q := int(math.Ceil(quota)); q < n {
			n = q
		}
	}
	if n < 1 {
		n = 1
	}
	return n
}

// readFileWith reads a small sysfs or cgroupfs file (at most 512 bytes) and
// parses it. It uses raw system calls: os.File's poller registration and
// finalizer cost more than the read itself on this hot path.
func readFileWith[T any](path string, parse func(io.Reader) (T, error)) (T, error) {
	var zero T
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return zero, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var buf [512]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return zero, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	v, err := parse(bytes.NewReader(buf[:n]))
	if err != nil {
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
