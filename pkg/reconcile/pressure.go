package reconcile

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/probe"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// Memory pressure from outside the batches (issue 57): after every
// snapshot the governor judges the memory (governor.Pressure); at
// PressureHard the evictor makes one running batch yield, chosen by
// governor.ChooseVictim, through the queue's Evict, naming the largest
// programs outside the batches. It runs on the prober's goroutine, one
// synchronous step per snapshot, and holds no lock of its own.

// evictSettle is how long after an eviction no other is made while the
// victim's memory goes back (its processes die, the next snapshots see
// it): one batch at a time, never a cascade on one spike.
const evictSettle = 2 * time.Second

// evictTop is how many outside programs an eviction names.
const evictTop = 3

// evictCandidate is a running batch with the name the queue knows it by.
type evictCandidate struct {
	queueName string
	governor.VictimCandidate
}

// evictor is the eviction step.
type evictor struct {
	gov *governor.Governor
	// candidates lists the running batches (Host.evictionCandidates).
	candidates func() []evictCandidate
	// evict is queue.Evict.
	evict func(task string, batch int64, reason, message string) bool
	// top names the largest programs outside the batches ("python3 (pid
	// 812) 4.1GiB"); nil names none.
	top func() []string
	// observed, when set, counts an eviction (metrics).
	observed func()
	log      zerolog.Logger
	now      func() time.Time

	// Owned by the prober's goroutine: the last victim and when.
	lastTask  string
	lastBatch int64
	lastAt    time.Time
}

// step evicts one batch when the governor's last judgement is
// PressureHard and no eviction is settling. It returns the queue name of
// the task evicted ("" for none). REQUIRES: the prober's goroutine.
func (v *evictor) step() string {
	p := v.gov.Pressure()
	if p.Level != governor.PressureHard {
		return ""
	}
	now := v.now()
	cands := v.candidates()
	if v.lastTask != "" {
		for _, c := range cands {
			if c.queueName == v.lastTask && c.Batch == v.lastBatch {
				return "" // still dying
			}
		}
		if now.Sub(v.lastAt) < evictSettle {
			return ""
		}
	}
	vc := make([]governor.VictimCandidate, len(cands))
	for i, c := range cands {
		vc[i] = c.VictimCandidate
	}
	i := governor.ChooseVictim(vc, p.Hard-p.Available, now)
	if i < 0 {
		return ""
	}
	c := cands[i]
	var top []string
	if v.top != nil {
		top = v.top()
	}
	msg := governor.EvictionMessage(c.Batch, p, top)
	if !v.evict(c.queueName, c.Batch, v1alpha1.ReasonEvicted, msg) {
		return ""
	}
	v.lastTask, v.lastBatch, v.lastAt = c.queueName, c.Batch, now
	if v.observed != nil {
		v.observed()
	}
	v.log.Warn().Str("task", plainName(c.queueName)).Int64("batch", c.Batch).
		Int64("outsideBytes", p.Outside).Int64("availableBytes", p.Available).Msg(msg)
	return c.queueName
}

// topOutside names the largest programs outside the batches, as top
// shows them (the batches' processes carry runner.BatchIDEnv), within
// the cgroup whose limit bounds the controller when domain names one.
func topOutside(domain func() string) []string {
	d := ""
	if domain != nil {
		d = domain()
	}
	procs, err := probe.TopProcesses("", evictTop, runner.BatchIDEnv+"=", d)
	if err != nil {
		return nil
	}
	out := make([]string, len(procs))
	for i, p := range procs {
		out[i] = fmt.Sprintf("%s (pid %d) %s", p.Comm, p.PID, governor.FormatBytes(p.RSS))
	}
	return out
}

// evictionCandidates lists every spool's running batches.
func (h *Host) evictionCandidates() []evictCandidate {
	h.spoolsMu.RLock()
	defer h.spoolsMu.RUnlock()
	var out []evictCandidate
	for _, c := range h.spools {
		prefix := spoolPrefix(c.idx)
		c.batches.mu.Lock()
		for rb, qb := range c.batches.mu.running {
			out = append(out, evictCandidate{queueName: prefix + qb.Task, VictimCandidate: governor.VictimCandidate{
				Task: qb.Task, Batch: qb.Index, Started: qb.Contract.GrantedAt, Threads: qb.Contract.Threads,
				Reserved: qb.Contract.MemoryBytes, Used: rb.MemoryBytes(),
			}})
		}
		c.batches.mu.Unlock()
	}
	return out
}

// Kill kills the batch at once where its executor can (runner.Batch:
// SIGKILL, no grace), else cancels it.
func (r runningBatch) Kill() {
	if k, ok := r.b.(interface{ Kill() }); ok {
		k.Kill()
		return
	}
	r.b.Cancel()
}
