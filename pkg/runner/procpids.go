package runner

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/kernfile"
)

// procTGIDOffset is where procfs's root directory puts the process with
// pid P in its listing: at offset procTGIDOffset+P (the kernel's
// TGID_OFFSET, fs/proc/base.c, unchanged since Linux 2.6). Seeking there
// lists the processes from pid P up, without walking the older ones: the
// mark scan after each batch reads the few processes started since its
// leader, not the whole machine (BenchmarkMarkScan).
const procTGIDOffset = 258

// procSeeks reports, once per procfs mount point, whether seeking its
// root to procTGIDOffset+P starts the listing at pid P on this kernel:
// checked with the caller's own pid, which must come first. Anything
// else (not a procfs, another encoding, another pid namespace) lists the
// whole directory.
var procSeeks sync.Map // procRoot -> bool

// seekableProc reports whether procRoot honours procTGIDOffset.
func seekableProc(procRoot string) bool {
	if ok, known := procSeeks.Load(procRoot); known {
		return ok.(bool)
	}
	ok := false
	var fs unix.Statfs_t
	if unix.Statfs(procRoot, &fs) == nil && fs.Type == unix.PROC_SUPER_MAGIC {
		self := os.Getpid()
		names, err := readProcFrom(procRoot, self, 1)
		ok = err == nil && len(names) == 1 && names[0] == strconv.Itoa(self)
	}
	procSeeks.Store(procRoot, ok)
	return ok
}

// readProcFrom lists at most n entries (n <= 0: all) of procRoot from the
// offset of pid from on.
func readProcFrom(procRoot string, from, n int) ([]string, error) {
	d, err := kernfile.OpenFile(procRoot, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if _, err := d.Seek(int64(procTGIDOffset+from), io.SeekStart); err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(n)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}

// pidsAfter returns the pids listed in procRoot above after (after <= 0:
// every pid) and at most the last pid given out once they were listed:
// the kernel gives pids out in increasing order until they wrap round, so
// a process above that last one is older than after's, from before a
// wrap (a machine whose pids wrapped round has its kernel threads and
// daemons there, and a scan for what a batch started need not read
// them). When the kernel's pids wrapped round since after was given out
// (ns_last_pid below it, or unreadable), the processes started since may
// have any pid, and every pid is returned.
func pidsAfter(procRoot string, after int) ([]int, error) {
	names, err := listProc(procRoot, after)
	if err != nil {
		return nil, err
	}
	if after > 0 {
		if last, ok := nsLastPid(procRoot); ok && last >= after {
			return pidsIn(names, after, last), nil
		}
		if names, err = listProc(procRoot, 0); err != nil {
			return nil, err
		}
	}
	return pidsIn(names, 0, math.MaxInt), nil
}

// listProc lists procRoot, from pid after+1 on where it can seek there
// (after > 0), else whole.
func listProc(procRoot string, after int) ([]string, error) {
	if after > 0 && seekableProc(procRoot) {
		return readProcFrom(procRoot, after+1, 0)
	}
	ents, err := os.ReadDir(procRoot)
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, err
}

// pidsIn returns the names that are pids above after and at most upto.
func pidsIn(names []string, after, upto int) []int {
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid > after && pid <= upto {
			pids = append(pids, pid)
		}
	}
	return pids
}

// nsLastPid returns the last pid the kernel gave out in the pid namespace
// of the reader of procRoot (ns_last_pid), false when it cannot be read.
func nsLastPid(procRoot string) (int, bool) {
	b, err := kernfile.Read(filepath.Join(procRoot, "sys", "kernel", "ns_last_pid"))
	if err != nil {
		return 0, false
	}
	last, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	return last, err == nil
}
