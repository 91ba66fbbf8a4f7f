package queue_test

import (
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// TestRetryDelayIsTheWorkqueueBackoff: the n-th delay is what
// controller-runtime's per-item rate limiter waits after the n-th failure
// in a row, for a batch's defaults and a status write's bounds, well past
// the cap.
func TestRetryDelayIsTheWorkqueueBackoff(t *testing.T) {
	for _, b := range []struct{ base, ceiling time.Duration }{
		{queue.DefaultRetryBackoff, queue.DefaultMaxRetryBackoff},
		{100 * time.Millisecond, 10 * time.Second},
		{time.Second, time.Second},
		{3 * time.Millisecond, 1000 * time.Millisecond},
	} {
		rl := workqueue.NewTypedItemExponentialFailureRateLimiter[string](b.base, b.ceiling)
		for n := 1; n <= 70; n++ {
			if got, want := queue.RetryDelay(b.base, b.ceiling, n), rl.When("x"); got != want {
				t.Errorf("RetryDelay(%v, %v, %d) = %v, want %v", b.base, b.ceiling, n, got, want)
			}
		}
	}
	if got := queue.RetryDelay(time.Second, time.Minute, 0); got != time.Second {
		t.Errorf("RetryDelay(n=0) = %v, want the base", got)
	}
	if got := queue.RetryDelay(time.Second, time.Minute, 1<<40); got != time.Minute {
		t.Errorf("RetryDelay(n=2^40) = %v, want the cap", got)
	}
}
