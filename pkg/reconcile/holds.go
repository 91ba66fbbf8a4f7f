package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/control"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// holdRetry bounds how long a waiting hold goes without asking the
// governor again; a batch's release or a snapshot that freed memory asks
// at once (kick).
const holdRetry = 250 * time.Millisecond

// holdBook keeps the holds: reservations with no batch, asked over the
// control socket by a program the user runs (exec), the governor's like
// any other. While one waits, the batches admitted must leave room for it
// (gate), so that a stream of batches never starves the person at the
// machine. Its mutex is a leaf: taken with the queue's held (gate), it
// takes no other lock.
type holdBook struct {
	mu struct {
		sync.Mutex
		next  int64
		holds map[int64]*hold
		// kick is closed, and replaced, when memory may have been freed.
		kick chan struct{}
	}
}

// hold is one hold, waiting (res zero) or granted.
type hold struct {
	info    control.HoldInfo
	granted bool
}

func newHoldBook() *holdBook {
	b := &holdBook{}
	b.mu.holds = map[int64]*hold{}
	b.mu.kick = make(chan struct{})
	return b
}

// kick wakes the waiting holds. Never blocks.
func (b *holdBook) kick() {
	b.mu.Lock()
	close(b.mu.kick)
	b.mu.kick = make(chan struct{})
	b.mu.Unlock()
}

// kicked is closed at the next kick.
func (b *holdBook) kicked() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.kick
}

// waitingDemand is what the holds waiting now ask, summed.
func (b *holdBook) waitingDemand() (mem, gpuMem int64, gpuSlots int, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.mu.holds {
		if !h.granted {
			mem += h.info.Demand.Memory
			gpuMem += h.info.Demand.GPUMemory
			gpuSlots += h.info.Demand.GPUSlots
			n++
		}
	}
	return mem, gpuMem, gpuSlots, n
}

// list is every hold, oldest first.
func (b *holdBook) list() []control.HoldInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]control.HoldInfo, 0, len(b.mu.holds))
	for _, h := range b.mu.holds {
		out = append(out, h.info)
	}
	slices.SortFunc(out, func(a, b control.HoldInfo) int { return int(a.ID - b.ID) })
	return out
}

// holdEstimate is a demand as the governor's estimate: one batch of one
// item whose fixed memory is the hold.
func holdEstimate(d control.Demand) (governor.Estimate, error) {
	if d.Memory < 0 || d.GPUMemory < 0 || d.GPUSlots < 0 || d.Threads < 0 {
		return governor.Estimate{}, errors.New("hold: negative demand")
	}
	t := max(d.Threads, 1)
	return governor.Estimate{Class: "exec", FixedMemory: d.Memory, FixedGPUMemory: d.GPUMemory,
		BatchMin: 1, BatchMax: 1, Threads: t, MinThreads: t, GPUSlots: d.GPUSlots}, nil
}

// Hold reserves d for the peer p, waiting (its reason handed to waiting
// each time it changes) until the governor grants it, refuses it for
// good, d.NoWait and it does not fit now, or ctx ends. release returns
// the reservation exactly once (later calls do nothing) and wakes the
// queue. A hold counts as any reservation: no batch is admitted into its
// memory; while it waits, the batches admitted leave room for it.
func (h *Host) Hold(ctx context.Context, p control.Peer, d control.Demand, waiting func(string)) (control.Grant, func(), error) {
	est, err := holdEstimate(d)
	if err != nil {
		return control.Grant{}, nil, err
	}
	b := h.holds
	b.mu.Lock()
	b.mu.next++
	id := b.mu.next
	x := &hold{info: control.HoldInfo{ID: id, UID: p.UID, PID: p.PID, User: userName(p.UID), Command: d.Command, Demand: d, Since: time.Now()}}
	b.mu.holds[id] = x
	b.mu.Unlock()
	granted := false
	defer func() {
		if !granted {
			b.mu.Lock()
			delete(b.mu.holds, id)
			b.mu.Unlock()
			h.queue.Wake() // the batches held back for it may go
		}
	}()
	last := ""
	for {
		kicked := b.kicked()
		dec, res, ok := h.gov.Reserve(est)
		if ok {
			c := res.Contract()
			g := control.Grant{ID: res.ID(), Memory: c.MemoryBytes, GPUMemory: c.GPUMemoryBytes, GPUID: c.GPUID, GPUSlots: c.GPUSlots, Threads: c.Threads}
			b.mu.Lock()
			x.granted, x.info.Grant, x.info.Since, x.info.Reason = true, &g, time.Now(), ""
			b.mu.Unlock()
			granted = true
			h.log.Info().Int64("hold", id).Int("uid", p.UID).Int("pid", p.PID).Str("command", d.Command).Int64("memory", c.MemoryBytes).Msg("hold granted")
			var once sync.Once
			release := func() {
				once.Do(func() {
					if err := h.gov.Release(res); err != nil && !errors.Is(err, governor.ErrClosed) {
						h.log.Warn().Err(err).Int64("hold", id).Msg("hold release")
					}
					b.mu.Lock()
					delete(b.mu.holds, id)
					b.mu.Unlock()
					h.log.Info().Int64("hold", id).Int("uid", p.UID).Int("pid", p.PID).Msg("hold released")
					h.queue.Wake()
				})
			}
			return g, release, nil
		}
		msg := dec.Message()
		if dec.Verdict == governor.Reject {
			return control.Grant{}, nil, fmt.Errorf("the hold can never be granted on this machine: %s", msg)
		}
		if dec.Reason == governor.ReasonClosed {
			return control.Grant{}, nil, errors.New("the controller is stopping")
		}
		if d.NoWait {
			return control.Grant{}, nil, fmt.Errorf("the hold does not fit now (--no-wait): %s", msg)
		}
		if msg != last {
			last = msg
			b.mu.Lock()
			x.info.Reason = msg
			b.mu.Unlock()
			waiting(msg)
		}
		t := time.NewTimer(holdRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return control.Grant{}, nil, ctx.Err()
		case <-kicked:
		case <-t.C:
		}
		t.Stop()
	}
}

// Holds lists the holds, waiting and granted, oldest first.
func (h *Host) Holds() []control.HoldInfo { return h.holds.list() }

// gate is what the machine asks before a batch's reservation while holds
// wait: the batch is decided as if the waiting holds' memory, GPU memory
// and GPU slots came with it, and waits (never Rejected for it) when they
// would not fit together; ok means it may be reserved, at most at batch
// items. REQUIRES: called with the queue's mutex held (takes only the
// book's leaf mutex and the governor's).
func (b *holdBook) gate(gov *governor.Governor, e governor.Estimate) (d governor.Decision, batch int64, ok bool) {
	mem, gpuMem, slots, n := b.waitingDemand()
	if n == 0 {
		return governor.Decision{}, e.BatchMax, true
	}
	probe := e
	probe.FixedMemory += mem
	probe.FixedGPUMemory += gpuMem
	probe.GPUSlots += slots
	d = gov.Decide(probe)
	if d.Verdict == governor.Admit || d.Verdict == governor.ReduceBatch {
		return d, d.Batch, true
	}
	if d.Verdict == governor.Reject {
		// The hold with it can never fit; the batch alone may: it waits for
		// the hold, never rejected for it.
		d.Verdict, d.Reason = governor.Wait, governor.ReasonInsufficientMemory
		if d.Budget == governor.BudgetNone {
			d.Budget = governor.BudgetMemory
		}
	}
	return d, 0, false
}

// userName is uid's name, or the number.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}
