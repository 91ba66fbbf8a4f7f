package measure

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrBadStat reports a /proc/PID/stat line that does not parse.
var ErrBadStat = errors.New("malformed stat line")

// ClockTicks is USER_HZ, the unit of /proc/PID/stat times; 100 on every
// Linux architecture Go supports.
const ClockTicks = 100

// ProcStat is the part of /proc/PID/stat the bench needs.
type ProcStat struct {
	// PPid is the parent pid.
	PPid int
	// UTime and STime are user and system CPU in clock ticks.
	UTime, STime uint64
	// StartTicks is the start time in clock ticks since boot.
	StartTicks uint64
}

// CPUTicks is user plus system time.
func (s ProcStat) CPUTicks() uint64 { return s.UTime + s.STime }

// ParseStat parses the text of /proc/PID/stat. The command name may hold
// spaces and parentheses, so fields are counted after the last ')'.
func ParseStat(line string) (ProcStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return ProcStat{}, ErrBadStat
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15, starttime 22.
	if len(f) < 20 {
		return ProcStat{}, ErrBadStat
	}
	var s ProcStat
	var err error
	if s.PPid, err = strconv.Atoi(f[1]); err != nil {
		return ProcStat{}, fmt.Errorf("ppid: %w: %w", ErrBadStat, err)
	}
	if s.UTime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("utime: %w: %w", ErrBadStat, err)
	}
	if s.STime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("stime: %w: %w", ErrBadStat, err)
	}
	if s.StartTicks, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("starttime: %w: %w", ErrBadStat, err)
	}
	return s, nil
}

// ParseStatmRSS returns the resident pages (second field) of /proc/PID/statm.
func ParseStatmRSS(text string) (int64, error) {
	f := strings.Fields(text)
	if len(f) < 2 {
		return 0, fmt.Errorf("statm: %w", ErrBadStat)
	}
	return strconv.ParseInt(f[1], 10, 64)
}

// Proc reads per-process files under an injectable /proc root.
type Proc struct {
	// Root is the procfs mount, usually /proc.
	Root string
	// PageSize is the page size in bytes.
	PageSize int64
}

// NewProc returns a Proc on root with the system page size.
func NewProc(root string) Proc { return Proc{Root: root, PageSize: int64(os.Getpagesize())} }

// Stat reads /proc/PID/stat.
func (p Proc) Stat(pid int) (ProcStat, error) {
	b, err := os.ReadFile(filepath.Join(p.Root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return ProcStat{}, fmt.Errorf("read stat of %d: %w", pid, err)
	}
	return ParseStat(string(b))
}

// RSS reads the resident set size of pid in bytes from /proc/PID/statm.
func (p Proc) RSS(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join(p.Root, strconv.Itoa(pid), "statm"))
	if err != nil {
		return 0, fmt.Errorf("read statm of %d: %w", pid, err)
	}
	pages, err := ParseStatmRSS(string(b))
	if err != nil {
		return 0, err
	}
	return pages * p.PageSize, nil
}

// HWM reads VmHWM (the peak resident set) of pid in bytes.
func (p Proc) HWM(pid int) (int64, error) {
	b, err := os.ReadFile(filepath.Join(p.Root, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("read status of %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, fmt.Errorf("status of %d: no VmHWM", pid)
}
