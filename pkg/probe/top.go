package probe

import (
	"cmp"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// ProcessMemory is one process and its resident memory, as top shows it.
type ProcessMemory struct {
	PID  int
	Comm string
	// RSS is its resident set size in bytes.
	RSS int64
}

// TopProcesses returns the n processes of procRoot with the largest
// resident memory, largest first, leaving out those whose environment
// holds skipEnv (a "NAME=" prefix; "" leaves none out): the controller
// passes its batches' marker, so that what is listed is what the other
// programs use. With domain (a cgroup directory, MemoryDomain) only the
// processes of that cgroup and those below it count: the memory its
// limit bounds. A process that ends while it is read is left out.
func TopProcesses(procRoot string, n int, skipEnv, domain string) ([]ProcessMemory, error) {
	if procRoot == "" {
		procRoot = DefaultProcRoot
	}
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, err
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, err
	}
	var in map[int]bool
	if domain != "" {
		in = domainPIDs(domain)
	}
	out := make([]ProcessMemory, 0, len(procs))
	for _, p := range procs {
		if in != nil && !in[p.PID] {
			continue
		}
		st, err := p.Stat()
		if err != nil || st.RSS <= 0 {
			continue // gone, or a kernel thread
		}
		if skipEnv != "" {
			if env, err := p.Environ(); err == nil && slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, skipEnv) }) {
				continue
			}
		}
		out = append(out, ProcessMemory{PID: p.PID, Comm: st.Comm, RSS: int64(st.ResidentMemory())})
	}
	slices.SortFunc(out, func(a, b ProcessMemory) int {
		return cmp.Or(cmp.Compare(b.RSS, a.RSS), cmp.Compare(a.PID, b.PID))
	})
	return out[:min(n, len(out))], nil
}

// domainPIDs are the processes of the cgroup dir and those below it (its
// cgroup.procs files, v1 and v2 alike).
func domainPIDs(dir string) map[int]bool {
	in := map[int]bool{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				in[pid] = true
			}
		}
		return nil
	})
	return in
}

// MemoryDomain is the cgroup directory whose limit bounds the controller's
// memory (the smallest limit from its cgroup up), "" when none does: the
// whole machine is then the domain. Read at each call (a limit may be set
// or lifted).
func (p *Prober) MemoryDomain() string {
	_, _, at, err := cgroupMemoryAt(p.cg.memVersion, p.cg.memDirs)
	if err != nil {
		return ""
	}
	return at
}
