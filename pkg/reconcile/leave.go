package reconcile

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// errLeft ends a spool's loop once it left the host (Leave).
var errLeft = errors.New("the spool left the controller")

// leaveNote asks a spool's loop to leave: reply says whether it may.
type leaveNote struct{ reply chan error }

// leaveState is a spool's part in Leave.
type leaveState struct {
	// leaving is set by the loop (owner goroutine) once its tasks are out
	// of the queue: the loop returns errLeft.
	leaving bool
	// left is set, under Host.spoolsMu, once the host counts its loop as
	// gone; done is closed once its statuses are written and it is closed.
	left bool
	done chan struct{}
}

// Started is closed once Run accepts spools (Join, Leave): a spool asked
// for while the controller starts waits for it.
func (h *Host) Started() <-chan struct{} { return h.runningNow }

// Leave stops serving c's spool while the host runs, as a Join added it:
// refused while one of its tasks holds a batch (reserved or running: stop
// or pause them first, or wait). Its tasks leave the queue with their
// statuses written as at a controller's stop (a new controller of the
// spool, or a new Join, continues them); its loop, its writer and its
// watcher end; what it published is removed. The first spool (the
// controller's own, Add) never leaves. It returns once all that is done.
func (h *Host) Leave(c *Controller) error {
	h.spoolsMu.RLock()
	ok := h.running && c.started && !c.leave.left && c.idx > 0
	stopping := h.loopCtx
	h.spoolsMu.RUnlock()
	if !ok {
		return errors.New("the spool is not one this running controller was asked to serve")
	}
	reply := make(chan error, 1)
	c.inbox.push(leaveNote{reply: reply})
	select {
	case err := <-reply:
		if err != nil {
			return err
		}
	case <-stopping.Done():
		return errors.New("the controller is stopping")
	}
	<-c.leave.done
	return nil
}

// takeLeave answers a leaveNote: the spool leaves unless a task of it
// holds a batch. REQUIRES: owner goroutine.
func (c *Controller) takeLeave(n leaveNote) {
	if c.closing {
		n.reply <- errors.New("the controller is stopping")
		return
	}
	var busy []string
	for _, e := range c.tasks.entries {
		// A Pending task the queue holds was just reserved: its event is
		// on its way to this goroutine.
		if e.status.Phase == v1alpha1.PhaseRunning || e.status.Phase == v1alpha1.PhaseReserved ||
			(e.status.Phase == v1alpha1.PhasePending && e.inQueue && c.queue.Holds(e.name)) {
			busy = append(busy, e.name)
		}
	}
	if len(busy) > 0 {
		n.reply <- fmt.Errorf("%d task(s) of this spool hold a batch (%s): wait for them, or pause them (spec.paused: true) first", len(busy), strings.Join(busy, ", "))
		return
	}
	for _, e := range c.tasks.entries {
		if e.inQueue {
			_ = c.queue.Remove(e.name)
			e.inQueue = false
		}
	}
	c.leave.leaving = true
	n.reply <- nil
}

// loopEnded is what the goroutine of c's loop does with its end: a loop
// that left while the host runs is finished here, apart from Run's count;
// anything else (and a leave Run already stopped for) goes to Run.
// It returns the error to hand Run, and whether to hand it.
func (h *Host) loopEnded(c *Controller, err error) (error, bool) {
	if !errors.Is(err, errLeft) {
		return err, true
	}
	h.spoolsMu.Lock()
	if !h.running {
		h.spoolsMu.Unlock()
		close(c.leave.done) // Run finishes it with the others
		return nil, true
	}
	h.loops--
	c.leave.left, c.started = true, false
	h.leaving.Add(1)
	h.spoolsMu.Unlock()
	defer h.leaving.Done()
	c.batches.cleanups.Wait()
	c.finish()
	if c.batches.journal != nil {
		c.batches.journal.close()
	}
	h.mu.Lock()
	h.mu.reports[c.idx] = spoolReport{ready: true, settled: true, listed: true}
	h.mu.Unlock()
	c.log.Info().Msg("spool removed from the controller")
	close(c.leave.done)
	return nil, false
}
