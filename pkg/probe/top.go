package probe

import (
	"cmp"
	"slices"
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
// programs use. A process that ends while it is read is left out.
func TopProcesses(procRoot string, n int, skipEnv string) ([]ProcessMemory, error) {
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
	out := make([]ProcessMemory, 0, len(procs))
	for _, p := range procs {
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
