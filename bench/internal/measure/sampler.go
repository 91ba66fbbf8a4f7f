package measure

// PidLister lists the processes to sample.
type PidLister interface {
	Pids() ([]int, error)
}

// Sample is one sampling round.
type Sample struct {
	// RSS is the summed resident memory of the listed processes.
	RSS int64
	// Procs is how many processes were read.
	Procs int
}

// Sampler sums resident memory over a set of processes, keeps the peak, and
// keeps each process's last-seen CPU time as a fallback CPU account when no
// accounting cgroup exists (it misses at most one interval per process).
type Sampler struct {
	proc    Proc
	list    PidLister
	exclude map[int]bool

	peak    int64
	samples int
	lastCPU map[procKey]uint64
}

type procKey struct {
	pid   int
	start uint64
}

// NewSampler samples the processes list returns, except those in exclude
// (the sampler's own pid, for example).
func NewSampler(proc Proc, list PidLister, exclude ...int) *Sampler {
	ex := make(map[int]bool, len(exclude))
	for _, p := range exclude {
		ex[p] = true
	}
	return &Sampler{proc: proc, list: list, exclude: ex, lastCPU: map[procKey]uint64{}}
}

// Step takes one sample. Processes that vanish between the listing and the
// read are skipped: they hold no memory any more.
func (s *Sampler) Step() Sample {
	pids, err := s.list.Pids()
	if err != nil {
		return Sample{}
	}
	var out Sample
	for _, pid := range pids {
		if s.exclude[pid] {
			continue
		}
		rss, err := s.proc.RSS(pid)
		if err != nil {
			continue
		}
		out.RSS += rss
		out.Procs++
		if st, err := s.proc.Stat(pid); err == nil {
			s.lastCPU[procKey{pid, st.StartTicks}] = st.CPUTicks()
		}
	}
	s.samples++
	if out.RSS > s.peak {
		s.peak = out.RSS
	}
	return out
}

// Peak is the largest summed RSS seen.
func (s *Sampler) Peak() int64 { return s.peak }

// Samples is the number of rounds taken.
func (s *Sampler) Samples() int { return s.samples }

// SampledCPUSeconds is the sum of the last CPU time seen for every process.
func (s *Sampler) SampledCPUSeconds() float64 {
	var t uint64
	for _, v := range s.lastCPU {
		t += v
	}
	return float64(t) / ClockTicks
}

// PidList is a fixed list of pids, a PidLister for one process.
type PidList []int

// Pids returns the list.
func (l PidList) Pids() ([]int, error) { return l, nil }
