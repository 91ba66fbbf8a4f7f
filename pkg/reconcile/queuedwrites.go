package reconcile

import (
	"time"

	"golang.org/x/time/rate"
)

// The first status of a task only queued (waiting for a worker, written
// at QueuedWriteDelay) is the costliest write a task gets (the file's
// first, with its whole-file self-check) and, in a flood, the most
// useless: thousands of short tasks dropped at once each come due 3 s
// after they were read, while the queue runs them at hundreds a second.
// These writes go out queuedWriteBurst at once, then queuedWriteRate a
// second, oldest first; one whose task ran meanwhile is written once,
// when it ran (its phase change). A queue that lasts is written all the
// same: 1,000 tasks queued behind a long one within 50 s.
const (
	queuedWriteBurst = flushMax
	queuedWriteRate  = 20 // per second
)

// queuedLimit is the statusWriter's budget for those writes: a token
// bucket and, behind it, the records that wait for a token, oldest first.
// Owned by the writer's goroutine.
type queuedLimit struct {
	// tokens allows queuedWriteBurst at once, then queuedWriteRate a
	// second, on the pass's clock.
	tokens *rate.Limiter
	// backlog holds the records deferred, oldest first, each once
	// (pendingWrite.inBacklog); a record written or changed since (its
	// task ran) is dropped when its turn comes.
	backlog []*pendingWrite
}

func newQueuedLimit() queuedLimit {
	return queuedLimit{tokens: rate.NewLimiter(queuedWriteRate, queuedWriteBurst)}
}

// queuedOnly reports whether p's write is the first status of a task only
// queued: due at queuedUntil, not for a phase change or a batch's end.
func (p *pendingWrite) queuedOnly() bool {
	return !p.queuedUntil.IsZero() && p.urgentAt.IsZero() && !p.commit
}

// limitQueued takes from due the first writes of tasks only queued,
// behind any deferred earlier, and gives back those the budget allows at
// now, oldest first; the rest wait in the backlog.
func (w *statusWriter) limitQueued(due []*pendingWrite, now time.Time) []*pendingWrite {
	l := &w.queued
	kept := due[:0]
	for _, p := range due {
		switch {
		case !p.queuedOnly():
			kept = append(kept, p)
		case !p.inBacklog:
			// A record already there (requeued since) keeps its place:
			// in twice, it could be written twice by one pass.
			p.inBacklog = true
			l.backlog = append(l.backlog, p)
		}
	}
	if len(l.backlog) == 0 {
		return kept
	}
	n := 0
	for n < len(l.backlog) && l.tokens.TokensAt(now) >= 1 {
		p := l.backlog[n]
		p.inBacklog = false
		n++
		if w.queuedWaiting(p) {
			l.tokens.AllowN(now, 1)
			kept = append(kept, p)
		}
	}
	// Stale records at the head cost nothing more: drop them too.
	for n < len(l.backlog) && !w.queuedWaiting(l.backlog[n]) {
		l.backlog[n].inBacklog = false
		n++
	}
	clear(l.backlog[:n])
	l.backlog = l.backlog[n:]
	return kept
}

// queuedWaiting reports whether p, in the backlog, still waits for a
// token: its first status unwritten, nothing newer made it due (a record
// scheduled again is in the due queue, and written from there).
func (w *statusWriter) queuedWaiting(p *pendingWrite) bool {
	return w.current(p) && p.queuedOnly() && p.dueItemAt.IsZero()
}

// nextToken is how long until the backlog's head may be written (0:
// nothing is deferred).
func (w *statusWriter) nextToken(now time.Time) time.Duration {
	l := &w.queued
	if len(l.backlog) == 0 {
		return 0
	}
	tokens := l.tokens.TokensAt(now)
	if tokens >= 1 {
		return time.Millisecond
	}
	return time.Duration((1 - tokens) / queuedWriteRate * float64(time.Second))
}
