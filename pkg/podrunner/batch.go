package podrunner

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// resumeRetry is how long a batch whose Pod could not be made again at a
// resume waits before the next try.
const resumeRetry = 2 * time.Second

// podOp is a request to a batch's supervisor.
type podOp struct {
	kind  opKind
	reply chan error
}

type opKind int

const (
	opPause opKind = iota + 1
	opResume
	opCancel
)

// podBatch is one batch run as one Pod at a time (runner.Execution).
type podBatch struct {
	p *Pods
	// ctx is Start's: its end cancels the batch, as Cancel does.
	ctx      context.Context
	spec     runner.Spec
	ns       string
	template *corev1.Pod
	started  time.Time
	ops      chan podOp
	done     chan struct{}

	mu struct {
		sync.Mutex
		res runner.Result
	}
}

// create creates a Pod from the template and returns its name.
func (b *podBatch) create(ctx context.Context) (string, error) {
	pod, err := b.p.Client.CoreV1().Pods(b.ns).Create(ctx, b.template.DeepCopy(), metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			// The Pod itself is refused (Pod Security, a quota, a bad
			// volume): it holds until the Task changes.
			return "", fmt.Errorf("%w: task %q: the API server refused its Pod: %v", runner.ErrInvalidSpec, b.spec.Task, err)
		}
		return "", runner.NewPrepareError(fmt.Errorf("task %q: creating its Pod: %w", b.spec.Task, err))
	}
	return pod.Name, nil
}

// ending is how a Pod came to an end.
type ending struct {
	pod *corev1.Pod // nil: gone before it ended
	err error       // the API server could not be followed
}

// follow watches one Pod until it ended (its container terminated, or the
// kubelet refused it, or its image cannot be had), or it is gone, and
// sends that once; it stops at ctx's end.
func (b *podBatch) follow(ctx context.Context, name string, out chan<- ending) {
	pods := b.p.Client.CoreV1().Pods(b.ns)
	send := func(e ending) {
		select {
		case out <- e:
		case <-ctx.Done():
		}
	}
	for ctx.Err() == nil {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			send(ending{})
			return
		case err != nil:
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if ended(pod) {
			send(ending{pod: pod})
			return
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: pod.ResourceVersion,
		})
		if err != nil {
			continue
		}
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Deleted:
				w.Stop()
				send(ending{})
				return
			case watch.Added, watch.Modified:
				if pod, ok := ev.Object.(*corev1.Pod); ok && ended(pod) {
					w.Stop()
					send(ending{pod: pod})
					return
				}
			}
		}
		w.Stop()
	}
}

// The waiting reasons of a container that will not start without a
// change of the Task or of the cluster.
var stuckReasons = map[string]bool{
	"ErrImageNeverPull": true, "InvalidImageName": true, "ImagePullBackOff": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// ended reports whether pod has ended or never will start.
func ended(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Terminated != nil {
			return true
		}
		if w := cs.State.Waiting; w != nil && stuckReasons[w.Reason] {
			return true
		}
	}
	return false
}

// supervise owns the batch's Pods from the first one's creation to the
// end: it follows the running one, answers Pause, Resume and Cancel, and
// keeps the timeout (paused time excluded).
func (b *podBatch) supervise(name string) {
	defer close(b.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		endings    = make(chan ending, 1)
		stopFollow = func() {}
		paused     bool
		ran        time.Duration // running time before the current run
		runStart   = time.Now()
		timer      *time.Timer
		timerC     <-chan time.Time
	)
	startRun := func(pod string) {
		name = pod
		fctx, fcancel := context.WithCancel(ctx)
		stopFollow = fcancel
		endings = make(chan ending, 1)
		go b.follow(fctx, pod, endings)
		runStart = time.Now()
		if b.spec.Timeout > 0 {
			timer = time.NewTimer(max(b.spec.Timeout-ran, 0))
			timerC = timer.C
		}
	}
	stopRun := func() {
		stopFollow()
		if timer != nil {
			timer.Stop()
			timerC = nil
		}
		ran += time.Since(runStart)
	}
	// remove deletes the current Pod and waits until it is gone (bounded).
	remove := func() error {
		grace := *b.template.Spec.TerminationGracePeriodSeconds // the kill grace
		gone := b.p.Gone
		if gone <= 0 {
			gone = 2 * time.Minute
		}
		dctx, dcancel := context.WithTimeout(ctx, time.Duration(grace)*time.Second+gone)
		defer dcancel()
		if err := b.p.deletePod(dctx, b.ns, name, &grace); err != nil {
			return err
		}
		return b.p.waitGone(dctx, b.ns, name)
	}
	finish := func(res runner.Result) {
		res.Started, res.Ended = b.started, time.Now()
		b.mu.Lock()
		b.mu.res = res
		b.mu.Unlock()
	}
	// resume makes the batch's Pod again.
	var retryC <-chan time.Time
	resume := func() error {
		pod, err := b.create(ctx)
		if err == nil {
			paused = false
			startRun(pod)
		}
		return err
	}
	startRun(name)
	cancelled := func(reply chan error) {
		wasRunning := !paused
		if wasRunning {
			stopRun()
		}
		res := runner.Result{ExitCode: -1, Reason: runner.ReasonCancelled, Message: "cancelled: its Pod was deleted"}
		if err := context.Cause(b.ctx); err != nil {
			res.Message = fmt.Sprintf("cancelled: %v: its Pod was deleted", err)
		}
		if wasRunning {
			b.appendLog(ctx, name, res)
			if err := remove(); err != nil {
				res.Message += "; " + err.Error()
			}
		}
		if reply != nil {
			reply <- nil
		}
		finish(res)
	}
	for {
		select {
		case <-b.ctx.Done():
			cancelled(nil)
			return
		case e := <-endings:
			stopRun()
			res := b.outcome(ctx, name, e)
			if err := remove(); err != nil && res.Message != "" {
				res.Message += "; " + err.Error()
			}
			finish(res)
			return
		case <-timerC:
			stopRun()
			res := runner.Result{ExitCode: -1, Reason: runner.ReasonBatchTimeout,
				Message: fmt.Sprintf("ran longer than the batch timeout %v", b.spec.Timeout)}
			b.appendLog(ctx, name, res)
			if err := remove(); err != nil {
				res.Message += "; " + err.Error()
			}
			finish(res)
			return
		case op := <-b.ops:
			switch op.kind {
			case opPause:
				if paused {
					op.reply <- nil
					continue
				}
				stopRun()
				err := remove()
				paused = err == nil
				if !paused {
					startRun(name) // still running: follow it again
				}
				retryC = nil
				op.reply <- err
			case opResume:
				if !paused || b.ctx.Err() != nil {
					// A cancelled batch is not started again to be
					// deleted at once: its end is near.
					op.reply <- nil
					continue
				}
				err := resume()
				if err != nil {
					// The queue counts the batch resumed: the Pod is
					// made again until it is, or the batch ends.
					retryC = time.After(resumeRetry)
				}
				op.reply <- err
			case opCancel:
				cancelled(op.reply)
				return
			}
		case <-retryC:
			retryC = nil
			if paused && b.ctx.Err() == nil {
				if err := resume(); err != nil {
					retryC = time.After(resumeRetry)
				}
			}
		}
	}
}

// outcome is the result a Pod's ending says, its log appended to the
// task's.
func (b *podBatch) outcome(ctx context.Context, name string, e ending) runner.Result {
	res := runner.Result{ExitCode: -1, Enforcement: "pod " + b.ns + "/" + name}
	switch {
	case e.pod == nil:
		res.Message = "its Pod " + b.ns + "/" + name + " was deleted by someone else before it ended"
	default:
		pod := e.pod
		var term *corev1.ContainerStateTerminated
		var wait *corev1.ContainerStateWaiting
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == ContainerName {
				term, wait = cs.State.Terminated, cs.State.Waiting
			}
		}
		switch {
		case term != nil && term.Reason == "OOMKilled":
			ceiling := b.spec.MemoryCeiling()
			res.Reason = runner.ReasonMemoryExceeded
			res.OOMKills = 1
			res.PeakMemoryBytes, res.PeakWorkingSetBytes = ceiling, ceiling
			res.Message = fmt.Sprintf("the kubelet's cgroup killed it at its limit %s (the contract %s plus its tolerance)",
				governor.FormatBytes(ceiling), governor.FormatBytes(b.spec.MemoryLimit))
		case term != nil:
			res.ExitCode = int(term.ExitCode)
			msg, peak := splitPeak(term.Message)
			if peak > 0 {
				res.PeakMemoryBytes, res.PeakWorkingSetBytes = peak, peak
				res.Enforcement += ", peak from lardon3d-podwrap"
			}
			if term.ExitCode != 0 && msg != "" {
				res.Message = lastLine(msg)
			}
		case wait != nil:
			res.Message = fmt.Sprintf("its container cannot start: %s: %s", wait.Reason, wait.Message)
		default:
			res.Message = fmt.Sprintf("the kubelet ended its Pod: %s: %s", pod.Status.Reason, pod.Status.Message)
		}
	}
	b.appendLog(ctx, name, res)
	return res
}

// appendLog appends the Pod's output to the task's log, between a header
// and an end line. A log that cannot be read or written costs the batch
// nothing.
func (b *podBatch) appendLog(ctx context.Context, name string, res runner.Result) {
	if b.spec.LogPath == "" {
		return
	}
	f, err := os.OpenFile(b.spec.LogPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	s := b.spec
	fmt.Fprintf(f, "=== batch %d items %d..%d threads %d memory %s attempt %d pod %s/%s at %s ===\n",
		s.BatchIndex, s.BatchStart, s.BatchStart+s.BatchSize()-1, s.Threads, governor.FormatBytes(s.MemoryLimit),
		max(s.Attempt, 1), b.ns, name, b.started.UTC().Format(time.RFC3339))
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	limit := int64(16 << 20)
	if s.LogMaxBytes > 0 {
		limit = min(limit, s.LogMaxBytes)
	}
	rc, err := b.p.Client.CoreV1().Pods(b.ns).GetLogs(name, &corev1.PodLogOptions{Container: ContainerName, LimitBytes: &limit}).Stream(lctx)
	if err == nil {
		_, err = io.Copy(f, rc)
		rc.Close()
	}
	if err != nil {
		fmt.Fprintf(f, "(the Pod's log could not be read: %v)\n", err)
	}
	reason := res.Reason
	if reason == "" {
		reason = "-"
	}
	peak := "unknown"
	if res.PeakMemoryBytes > 0 {
		peak = governor.FormatBytes(res.PeakMemoryBytes)
	}
	fmt.Fprintf(f, "=== batch %d end exit %d reason %s peak %s %s ===\n", s.BatchIndex, res.ExitCode, reason, peak, res.Message)
}

// splitPeak takes the wrapper's peak line out of a termination message:
// what is left, and the peak (0: none).
func splitPeak(msg string) (string, int64) {
	var peak int64
	var kept []string
	for _, line := range strings.Split(msg, "\n") {
		if v, ok := strings.CutPrefix(line, v1alpha1.PodPeakMemoryPrefix); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
				peak = n
			}
			continue
		}
		kept = append(kept, line)
	}
	return strings.TrimSpace(strings.Join(kept, "\n")), peak
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// ask hands the supervisor a request and waits for its answer; once the
// batch ended there is nothing to do.
func (b *podBatch) ask(kind opKind) error {
	reply := make(chan error, 1)
	select {
	case b.ops <- podOp{kind: kind, reply: reply}:
		return <-reply
	case <-b.done:
		return nil
	}
}

// Pause deletes the batch's Pod and waits until it is gone.
func (b *podBatch) Pause() error { return b.ask(opPause) }

// Resume runs the batch again in a new Pod.
func (b *podBatch) Resume() error { return b.ask(opResume) }

// Cancel ends the batch: its Pod is deleted.
func (b *podBatch) Cancel() {
	select {
	case b.ops <- podOp{kind: opCancel}:
	case <-b.done:
	}
}

// Wait blocks until the batch ended and its Pod is gone.
func (b *podBatch) Wait() runner.Result {
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.res
}

// Done is closed once the batch ended.
func (b *podBatch) Done() <-chan struct{} { return b.done }

// Group is zero: no process of the batch is this machine's to kill.
func (b *podBatch) Group() runner.ProcessGroup { return runner.ProcessGroup{} }

// MemoryBytes is 0: the agent does not sample the Pod's memory.
func (b *podBatch) MemoryBytes() int64 { return 0 }

// Started is when the batch's first Pod was created.
func (b *podBatch) Started() time.Time { return b.started }
