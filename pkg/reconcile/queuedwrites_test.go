package reconcile

import (
	"fmt"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// queuedDrive drives a test writer's passes on a fake clock.
type queuedDrive struct {
	w       *statusWriter
	rec     *tallySpool
	now     time.Time
	version uint64
}

func newQueuedDrive(t *testing.T) *queuedDrive {
	rec := &tallySpool{writes: map[string]int{}}
	return &queuedDrive{w: testWriter(t, rec), rec: rec, now: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
}

func (d *queuedDrive) send(path string, r writeRequest) {
	d.version++
	r.path, r.name, r.version, r.at = path, path, d.version, d.now
	r.status = &v1alpha1.TaskStatus{}
	d.w.apply(r, d.now)
}

// step moves the clock by dt, making every pass due meanwhile, and
// returns the wait the last pass asked for.
func (d *queuedDrive) step(dt time.Duration) time.Duration {
	end := d.now.Add(dt)
	for {
		next := d.w.pass(d.now, false)
		if next == 0 || d.now.Add(next).After(end) {
			d.now = end
			return next
		}
		d.now = d.now.Add(next)
	}
}

func (d *queuedDrive) total() int {
	n := 0
	for _, c := range d.rec.writes {
		n += c
	}
	return n
}

// TestQueuedFirstWritesInAFlood: thousands of short tasks dropped at once,
// run two at a time at 250 a second, are each written once, when they
// run, not once more 3 s after they were read: the first statuses of
// tasks only queued go out 64 at once, then 20 a second, and those whose
// task ran meanwhile are never written as queued.
func TestQueuedFirstWritesInAFlood(t *testing.T) {
	d := newQueuedDrive(t)
	const n = 2000
	const queuedDelay = 3 * time.Second
	path := func(i int) string { return fmt.Sprintf("/spool/t%04d.yaml", i) }
	for i := range n {
		d.send(path(i), writeRequest{queuedUntil: d.now.Add(queuedDelay)})
	}
	start := d.now
	for i := range n { // each task runs and ends: one phase change
		d.send(path(i), writeRequest{urgent: true})
		d.step(4 * time.Millisecond)
	}
	d.step(time.Second)
	elapsed := d.now.Sub(start) - queuedDelay
	limit := n + queuedWriteBurst + int(elapsed.Seconds()*queuedWriteRate) + 1
	if got := d.total(); got > limit {
		t.Errorf("%d writes for %d tasks over %v: want at most %d (one each, and the queued ones the budget allows)", got, n, d.now.Sub(start), limit)
	}
	for i := range n {
		if d.rec.writes[path(i)] == 0 {
			t.Fatalf("%s never written", path(i))
		}
	}
	t.Logf("%d writes for %d tasks (%.2f per task)", d.total(), n, float64(d.total())/n)
}

// TestQueuedFirstWritesOfAQueueThatLasts: tasks queued behind a long one
// are all written, each once, oldest first: 64 at QueuedWriteDelay, the
// rest at 20 a second, tasks requeued meanwhile (an edit) included; the
// writer asks to be woken for the next one.
func TestQueuedFirstWritesOfAQueueThatLasts(t *testing.T) {
	d := newQueuedDrive(t)
	const n = 200
	const queuedDelay = 3 * time.Second
	path := func(i int) string { return fmt.Sprintf("/spool/q%03d.yaml", i) }
	for i := range n {
		d.send(path(i), writeRequest{queuedUntil: d.now.Add(queuedDelay)})
	}
	d.step(queuedDelay)
	if got := d.total(); got != queuedWriteBurst {
		t.Fatalf("%d written at QueuedWriteDelay, want %d", got, queuedWriteBurst)
	}
	for i := queuedWriteBurst; i < queuedWriteBurst+n/4; i++ { // edited while deferred
		d.send(path(i), writeRequest{queuedUntil: d.now.Add(queuedDelay)})
	}
	if next := d.step(100 * time.Millisecond); next <= 0 || next > time.Second/queuedWriteRate {
		t.Errorf("the writer asks to be woken in %v with statuses deferred, want within %v", next, time.Second/queuedWriteRate)
	}
	d.step(time.Duration(n-queuedWriteBurst)*time.Second/queuedWriteRate + 4*time.Second)
	for i := range n {
		if c := d.rec.writes[path(i)]; c != 1 {
			t.Errorf("%s written %d times, want once", path(i), c)
		}
	}
	if len(d.w.queued.backlog) != 0 {
		t.Errorf("the backlog still holds %d records once every status is written", len(d.w.queued.backlog))
	}
}

// TestQueuedFirstWriteRequeuedWhileDeferred: a task requeued (its
// manifest edited) while its first status waits for the budget is
// written once, even when the writer comes back late, with tokens enough
// for everything deferred in one pass (a slow write held it).
func TestQueuedFirstWriteRequeuedWhileDeferred(t *testing.T) {
	d := newQueuedDrive(t)
	const n = 100
	path := func(i int) string { return fmt.Sprintf("/spool/r%03d.yaml", i) }
	for i := range n {
		d.send(path(i), writeRequest{queuedUntil: d.now.Add(3 * time.Second)})
	}
	d.step(3 * time.Second)
	deferred := -1
	for i := range n {
		if d.rec.writes[path(i)] == 0 {
			deferred = i
		}
	}
	if deferred < 0 {
		t.Fatal("nothing deferred")
	}
	d.send(path(deferred), writeRequest{queuedUntil: d.now})
	d.w.pass(d.now, false)
	d.now = d.now.Add(10 * time.Second)
	d.w.pass(d.now, false)
	for i := range n {
		if c := d.rec.writes[path(i)]; c != 1 {
			t.Errorf("%s written %d times, want once", path(i), c)
		}
	}
}
