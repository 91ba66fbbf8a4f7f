package runner

import (
	"time"

	"github.com/prometheus/procfs"

	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
)

// Usage is what the processes of a batch use at one instant.
type Usage struct {
	// Procs is how many of its processes are alive.
	Procs int
	// Memory is its cgroup's working set, or without one its process
	// group's resident memory, in bytes.
	Memory int64
	// CPU is the CPU time of its processes, user and system, the
	// children they reaped included.
	CPU time.Duration
}

// SampleGroup reads what the batch recorded as process group pgid, in
// cgroup directory cgroupDir ("": none), uses now, as the batch's own
// meter samples it: the cgroup's working set and live processes (whatever
// their session) when it has one that can be read, else the process
// group's members found in fs (the same sampler). A batch that ended is
// one of no process.
func SampleGroup(fs procfs.FS, pgid int, cgroupDir string) (Usage, error) {
	if cgroupDir != "" {
		if g, err := cgroup.LoadDir(cgroupDir); err == nil {
			var u Usage
			if m, err := g.Memory(); err == nil {
				u.Memory = m.WorkingSet
			}
			live, _ := g.Live()
			for _, pid := range live {
				p, err := fs.Proc(pid)
				if err != nil {
					continue // ended meanwhile
				}
				if st, err := p.Stat(); err == nil {
					m := memberOf(st)
					if !m.gone() {
						u.Procs++
					}
					u.CPU += m.cpu
				}
			}
			return u, nil
		}
		// Ended meanwhile, or not readable: its process group.
	}
	s := newGroupSampler(fs, pgid)
	// Each process's stat file says its group, in whatever tree fs reads
	// (getpgid would ask this machine's kernel): one sample, not a loop.
	s.pgidOf = nil
	rss, live, err := s.sample()
	if err != nil {
		return Usage{}, err
	}
	return Usage{Procs: live, Memory: rss, CPU: s.cpu}, nil
}
