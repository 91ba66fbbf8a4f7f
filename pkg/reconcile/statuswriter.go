package reconcile

import (
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// Status write retries back off from writeRetryMin, doubling up to
// writeRetryMax, as controller-runtime requeues a failed reconcile.
const (
	writeRetryMin = 100 * time.Millisecond
	writeRetryMax = 10 * time.Second
)

// writeRequest is one version of a manifest's status, handed by the
// owner goroutine to the status writer.
type writeRequest struct {
	path, name string
	// version numbers the statuses of a controller: a later request
	// holds a later version.
	version uint64
	// status is the owner's copy to write; nil forgets the path (its
	// manifest is gone, or its task moved).
	status *v1alpha1.TaskStatus
	// urgent (a phase change) is written within PhaseWriteDelay; commit
	// (a batch's end) at once; queuedUntil, when set, is when the first
	// status of a task only queued is due at the latest.
	urgent, commit bool
	queuedUntil    time.Time
	at             time.Time
}

// writeOutcome tells the owner how the write of one version ended.
type writeOutcome struct {
	path    string
	version uint64
	// status is what was written (on success).
	status *v1alpha1.TaskStatus
	err    error
}

// pendingWrite is the writer's record of one manifest's status.
type pendingWrite struct {
	path, name string
	status     *v1alpha1.TaskStatus
	// version is the latest the owner handed; written the latest that
	// landed (dirty while they differ).
	version, written uint64
	// urgentAt is when the oldest unwritten phase change happened (zero:
	// none); lastWrite when the status was last written; queuedUntil,
	// for a new manifest never written and only queued, when its first
	// write is due at the latest; commit is set when committed progress
	// awaits its write.
	urgentAt, lastWrite, queuedUntil time.Time
	commit                           bool
	// retryAt is when a failed (or deferred) write is tried again;
	// failures counts the failures in a row, err is the last one's.
	retryAt      time.Time
	failures     int
	err          error
	failingSince time.Time
	// dueItemAt is the time of the record's live item in the due queue
	// (zero: none); inBacklog says the record waits in the backlog of
	// first statuses of queued tasks (queuedwrites.go).
	dueItemAt time.Time
	inBacklog bool
}

func (p *pendingWrite) dirty() bool { return p.version > p.written }

// statusWriter writes one spool's statuses on a goroutine of its own, as
// kubelet's status manager syncs pod statuses apart from its sync loop:
// the owner hands it versioned copies (never blocking), and a write that
// hangs (a file system stuck, an API call up to its timeout) delays no
// spool event. It owns when each status is written (duewrites.go), how
// many one pass writes (flushlimit.go), how fast the first statuses of
// tasks only queued go out (queuedwrites.go), the group commit, and the
// backoff of a failed write; it tells the owner each write's outcome.
type statusWriter struct {
	spool    Spool
	timing   writeTiming
	metrics  Metrics
	log      zerolog.Logger
	stateDir string
	// report hands an outcome to the owner (its inbox); committed tells
	// the batch adapter which progress a written status commits. Both
	// never block.
	report    func(writeOutcome)
	committed func(name string, generation, items int64)

	wake chan struct{}
	done chan struct{}
	mu   struct {
		sync.Mutex
		requests []writeRequest
		closing  bool
	}

	// Owned by the writer's goroutine.
	files map[string]*pendingWrite
	due   dueQueue
	// queued holds back the first writes of tasks only queued
	// (queuedwrites.go).
	queued queuedLimit
	// duePopped counts the items a pass popped (tests).
	duePopped int
	// errorsChanged: the set of failing writes changed since it was
	// last published for describe.
	errorsChanged bool
}

// writeTiming is when a status is due (Config's fields of that name).
type writeTiming struct {
	progress, phaseDelay time.Duration
}

func newStatusWriter(sp Spool, timing writeTiming, metrics Metrics, log zerolog.Logger, stateDir string) *statusWriter {
	return &statusWriter{
		spool: sp, timing: timing, metrics: metrics, log: log, stateDir: stateDir,
		report:    func(writeOutcome) {},
		committed: func(string, int64, int64) {},
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		files:     make(map[string]*pendingWrite),
		queued:    newQueuedLimit(),
	}
}

// submit hands the writer requests, in order; it never blocks.
func (w *statusWriter) submit(rs ...writeRequest) {
	if len(rs) == 0 {
		return
	}
	w.mu.Lock()
	w.mu.requests = append(w.mu.requests, rs...)
	w.mu.Unlock()
	w.signal()
}

func (w *statusWriter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes until close: each pass takes the requests handed since the
// last one, then writes what is due.
func (w *statusWriter) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		if w.take(now) {
			w.pass(now, true)
			w.logUnwritten()
			w.publishErrors()
			return
		}
		next := w.pass(now, false)
		w.publishErrors()
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// close makes the writer write every status it holds once, failed ones
// and ones not due yet included, and returns once it did.
func (w *statusWriter) close() {
	w.mu.Lock()
	w.mu.closing = true
	w.mu.Unlock()
	w.signal()
	<-w.done
}

// take applies the requests handed so far; it reports whether the owner
// asked the writer to close.
func (w *statusWriter) take(now time.Time) (closing bool) {
	w.mu.Lock()
	rs, closing := w.mu.requests, w.mu.closing
	w.mu.requests = nil
	w.mu.Unlock()
	for _, r := range rs {
		w.apply(r, now)
	}
	return closing
}

// apply merges one request into the path's record.
func (w *statusWriter) apply(r writeRequest, now time.Time) {
	p := w.files[r.path]
	if r.status == nil {
		if p != nil {
			delete(w.files, r.path)
			if p.err != nil {
				w.errorsChanged = true
			}
		}
		return
	}
	if p == nil {
		p = &pendingWrite{path: r.path}
		w.files[r.path] = p
	}
	p.name, p.status, p.version = r.name, r.status, r.version
	if r.urgent && p.urgentAt.IsZero() {
		p.urgentAt = r.at
	}
	p.commit = p.commit || r.commit
	if !r.queuedUntil.IsZero() {
		// A new generation only queued: written with its next phase
		// change, or at queuedUntil.
		p.urgentAt, p.queuedUntil = time.Time{}, r.queuedUntil
	}
	w.schedule(p, w.dueAt(p, now))
}

// dueAt is when p's dirty status is due for a write at now.
func (w *statusWriter) dueAt(p *pendingWrite, now time.Time) time.Time {
	at := p.lastWrite.Add(w.timing.progress)
	if !p.urgentAt.IsZero() {
		at = p.urgentAt.Add(w.timing.phaseDelay)
	} else if p.queuedUntil.After(at) {
		at = p.queuedUntil
	}
	if p.commit {
		at = now
	}
	if p.retryAt.After(at) {
		at = p.retryAt
	}
	return at
}

// pass writes the statuses that are due (with all set, every dirty one,
// failed ones included) and returns when the next one is (0: none
// waits). The writes due together are one group commit when the spool
// makes them.
func (w *statusWriter) pass(now time.Time, all bool) time.Duration {
	var due []*pendingWrite
	if all {
		for _, p := range w.files {
			if p.dirty() {
				due = append(due, p)
			}
		}
	} else {
		due = w.limitQueued(w.popDue(now), now)
		// limitDue sorts due in place: what it leaves is due[flushMax:],
		// still due, written by the next pass.
		var left int
		if due, left = limitDue(due, flushMax); left > 0 {
			for _, p := range due[len(due) : len(due)+left] {
				w.schedule(p, now)
			}
		}
	}
	for i, r := range w.writeAll(due) {
		p := due[i]
		if !w.wrote(p, now, r.err, r.took) && !all && p.dirty() {
			w.schedule(p, w.dueAt(p, now)) // at its retry
		}
	}
	next, token := w.nextDue(now), w.nextToken(now)
	if next == 0 || (token > 0 && token < next) {
		return token
	}
	return next
}

// groupWriter is a Spool that writes several statuses as one group
// commit (*spool.Spool is one).
type groupWriter interface {
	WriteStatuses(ws []spool.StatusWrite) []error
}

// writeResult is how one status write ended and how long it took.
type writeResult struct {
	err  error
	took time.Duration
}

// writeAll writes the statuses of ps: one group commit when the spool
// makes them, else one by one.
func (w *statusWriter) writeAll(ps []*pendingWrite) []writeResult {
	res := make([]writeResult, len(ps))
	if g, ok := w.spool.(groupWriter); ok && len(ps) > 1 {
		ws := make([]spool.StatusWrite, len(ps))
		for i, p := range ps {
			ws[i] = spool.StatusWrite{Path: p.path, Status: p.status}
		}
		start := time.Now()
		errs := g.WriteStatuses(ws)
		took := time.Since(start)
		for i := range ps {
			res[i] = writeResult{err: errs[i], took: took}
		}
		return res
	}
	for i, p := range ps {
		start := time.Now()
		err := w.spool.WriteStatus(p.path, p.status)
		res[i] = writeResult{err: err, took: time.Since(start)}
	}
	return res
}

// wrote settles the write of p's status that ended with err, and tells
// the owner; on failure p stays due (a commit point too) and is retried
// with backoff. It reports whether the write landed.
func (w *statusWriter) wrote(p *pendingWrite, now time.Time, err error, took time.Duration) bool {
	if errors.Is(err, spool.ErrDeferred) {
		// A writer holds the file (or an editor is saving it): the spool
		// makes the write once it is free. Not a failure; the status
		// stays due and is tried again soon, in case the spool cannot.
		w.log.Debug().Str("task", p.name).Str("file", p.path).Err(err).Msg("status write deferred")
		p.retryAt = now.Add(2 * writeRetryMin)
		return false
	}
	w.metrics.ObserveStatusWrite(took, err)
	w.report(writeOutcome{path: p.path, version: p.version, status: p.status, err: err})
	if err != nil {
		p.failures++
		backoff := queue.RetryDelay(writeRetryMin, writeRetryMax, p.failures)
		p.retryAt = now.Add(backoff)
		if p.err == nil || p.err.Error() != err.Error() || p.failures&(p.failures-1) == 0 {
			w.log.Warn().Str("task", p.name).Str("file", p.path).Int("attempts", p.failures).Dur("retryIn", backoff).Err(err).Msg("status not written; retrying")
		}
		if p.err == nil {
			p.failingSince = now
		}
		w.errorsChanged = true
		p.err = err
		return false
	}
	if p.err != nil {
		w.log.Info().Str("task", p.name).Str("file", p.path).Int("attempts", p.failures+1).Msg("status written after failures")
		w.errorsChanged = true
	}
	p.urgentAt, p.commit, p.queuedUntil = time.Time{}, false, time.Time{}
	p.lastWrite, p.written = now, p.version
	w.committed(p.name, p.status.ObservedGeneration, p.status.Progress.ItemsDone)
	p.err, p.failures, p.retryAt = nil, 0, time.Time{}
	return true
}

// logUnwritten logs, at shutdown, every status that could not be written.
func (w *statusWriter) logUnwritten() {
	for _, p := range w.files {
		if p.dirty() && p.err != nil {
			w.log.Error().Str("task", p.name).Str("file", p.path).Int("attempts", p.failures).Err(p.err).Msg("status still not written at shutdown; the next run resumes from the file's older status")
		}
	}
}

// publishErrors publishes the failing status writes for describe when
// they changed.
func (w *statusWriter) publishErrors() {
	if !w.errorsChanged {
		return
	}
	errs := make(map[string]WriteError)
	for _, p := range w.files {
		if p.err != nil {
			errs[p.name] = WriteError{File: p.path, Error: p.err.Error(), Attempts: p.failures, Since: p.failingSince}
		}
	}
	if err := publishWriteErrors(w.stateDir, errs); err != nil {
		w.log.Debug().Err(err).Msg("failing status writes not published")
		return
	}
	w.errorsChanged = false
}
