package reconcile

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// countingSpool counts the status writes per manifest.
type countingSpool struct {
	Spool
	mu     sync.Mutex
	writes map[string]int
}

func (s *countingSpool) WriteStatus(path string, st *v1alpha1.TaskStatus) error {
	s.mu.Lock()
	s.writes[path]++
	s.mu.Unlock()
	return s.Spool.WriteStatus(path, st)
}

// Twenty tasks wait for memory while the free memory moves at every probe:
// the reason stays, only the message's numbers change. Each task's wait is
// logged once and its status written a couple of times, not at every probe
// (before, a machine-wide gate over thousands of waiting tasks was
// thousands of writes and log lines per probe); the numbers in memory stay
// current.
func TestWaitWhoseNumbersMoveIsNotRewrittenAtEveryProbe(t *testing.T) {
	logs := &syncBuffer{}
	h := newHarness(t, Config{})
	h.logs = logs
	var probes atomic.Int64
	h.snapshot = func() (governor.Snapshot, error) {
		n := probes.Add(1)
		s := fixedMachine()
		s.MemAvailable = gi + (n%8)*200<<20 // 1.0 to 2.4 GiB, another at each probe
		return s, nil
	}
	counter := &countingSpool{writes: map[string]int{}}
	h.wrap = func(s Spool) Spool { counter.Spool = s; return counter }
	for i := range 20 {
		h.write(fmt.Sprintf("t%02d.yaml", i), manifest(fmt.Sprintf("t%02d", i), "true", "  resources: {fixed: {memory: 4Gi}}\n"))
	}
	h.start()
	h.eventually("every task waiting", func() bool {
		for i := range 20 {
			if st := h.status(fmt.Sprintf("t%02d.yaml", i)); st.Phase != v1alpha1.PhasePending || !strings.Contains(fmt.Sprint(st.Conditions), string(governor.ReasonInsufficientMemory)) {
				return false
			}
		}
		return true
	})
	start := probes.Load()
	time.Sleep(3 * time.Second)
	if n := probes.Load() - start; n < 8 {
		t.Fatalf("only %d probes in 3 s: the numbers did not move enough to test", n)
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	for path, n := range counter.writes {
		if n > 3 {
			t.Errorf("%s written %d times while waiting for the same reason", path, n)
		}
	}
	logs.mu.Lock()
	logged := logs.buf.String()
	logs.mu.Unlock()
	// Counted for the reason that stays: a task taken before the first
	// probe waited for the machine's snapshot first, another reason,
	// logged once too.
	if n := strings.Count(logged, `"reason":"`+string(governor.ReasonInsufficientMemory)+`","message":"waiting: `); n > 20 {
		t.Errorf("%d waiting lines logged for 20 tasks waiting for one reason", n)
	}
}
