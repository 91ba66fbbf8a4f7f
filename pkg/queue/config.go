package queue

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/lardon3d/lardon3d-controller/pkg/share"
)

// Defaults of Config.
const (
	DefaultRescanWait      = 500 * time.Millisecond
	DefaultBoundaryPoll    = 50 * time.Millisecond
	DefaultRetryBackoff    = time.Second
	DefaultMaxRetryBackoff = 60 * time.Second
	DefaultHistorySize     = 64
	// DefaultPriorityMaxAge: a low-priority task waits at most about this
	// long before it competes with the highest priority.
	DefaultPriorityMaxAge = 30 * time.Minute
)

// Config tunes the queue. Zero fields take their defaults.
type Config struct {
	// MaxParallel caps the tasks that hold a worker at once (Reserved,
	// Running, Paused, or between two batches). 0 means no cap: as many as
	// the governor admits.
	MaxParallel int
	// RescanWait bounds the dispatcher's sleep while a task told Wait is
	// pending (default 500 ms, the seed's value). Any signal ends it sooner.
	RescanWait time.Duration
	// BoundaryPoll is the period at which a task between two batches asks
	// the governor again while it is told Wait (default 50 ms, the seed's).
	BoundaryPoll time.Duration
	// RetryBackoff is the delay before the first retry of a failed batch;
	// it doubles at each retry of the same batch (default 1 s).
	RetryBackoff time.Duration
	// MaxRetryBackoff caps the doubling (default 60 s).
	MaxRetryBackoff time.Duration
	// HistorySize bounds History (default 64).
	HistorySize int
	// LargestBatches leaves the governor's estimates without Peers: no
	// batch is held to a share of memory, each is the largest that fits
	// (--batch-policy largest).
	LargestBatches bool
	// Fair is the fair-share and quota accounting between accounts
	// (share.Config: half-life, shares, quotas).
	Fair share.Config
	// PriorityMaxAge is how long a pending task waits before it is asked
	// as if it had the highest priority among the pending ones; in
	// between, its priority rises linearly toward it (aging: no task
	// starves under a stream of higher priorities). 0: DefaultPriorityMaxAge.
	PriorityMaxAge time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxParallel < 0 {
		c.MaxParallel = 0
	}
	if c.RescanWait <= 0 {
		c.RescanWait = DefaultRescanWait
	}
	if c.BoundaryPoll <= 0 {
		c.BoundaryPoll = DefaultBoundaryPoll
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxRetryBackoff <= 0 {
		c.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		c.MaxRetryBackoff = c.RetryBackoff
	}
	if c.PriorityMaxAge <= 0 {
		c.PriorityMaxAge = DefaultPriorityMaxAge
	}
	if c.HistorySize <= 0 {
		c.HistorySize = DefaultHistorySize
	}
	return c
}

// backoff returns the delay before retry number n (n >= 1) of a batch.
func (c Config) backoff(n int) time.Duration {
	return RetryDelay(c.RetryBackoff, c.MaxRetryBackoff, n)
}

// RetryDelay is the wait after the n-th failure in a row (n >= 1; less
// counts as 1): base, doubled at each further failure, never above
// ceiling. It is the n-th step of apimachinery's wait.Backoff doubling
// from base up to ceiling, the one backoff of the controller's retries: a
// failed batch's (Config.RetryBackoff up to MaxRetryBackoff) and a failed
// status write's. REQUIRES: 0 < base <= ceiling.
func RetryDelay(base, ceiling time.Duration, n int) time.Duration {
	b := wait.Backoff{Duration: base, Factor: 2, Cap: ceiling, Steps: n - 1}
	for b.Steps > 0 { // at most until the cap, which ends the steps
		b.Step()
	}
	return min(b.Duration, ceiling)
}

// Option changes how New builds a queue.
type Option func(*Queue)

// WithClock sets the clock of every timer and event time (tests pass a
// k8s.io/utils/clock/testing FakeClock). Default: the real clock.
func WithClock(c clock.WithTicker) Option {
	return func(q *Queue) { q.clock = c }
}

// WithLearner sets the Learner that revises the estimates of the tasks
// that learn their costs and of those killed for memory (default none:
// every task keeps its Estimate and a kill halves its batch).
func WithLearner(l Learner) Option {
	return func(q *Queue) { q.learn = l }
}
