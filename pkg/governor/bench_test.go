package governor

import (
	"strconv"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkDecide measures one decide-and-reserve followed by its release,
// with N other reservations active.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{0, 100, 10000} {
		b.Run("reservations="+strconv.Itoa(n), func(b *testing.B) {
			g := New(Config{}, WithClock(clocktesting.NewFakePassiveClock(time.Unix(0, 0))))
			g.Update(Snapshot{MemTotal: 1 << 40, MemAvailable: 1 << 40, CPUs: 20000})
			e := Estimate{FixedMemory: 1 << 20, PerItemMemory: 1 << 10, BatchMin: 1, BatchMax: 16, Threads: 1, MinThreads: 1}
			for range n {
				if _, _, ok := g.Reserve(e); !ok {
					b.Fatal("setup reservation refused")
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, r, ok := g.Reserve(e)
				if !ok {
					b.Fatal("refused")
				}
				if err := g.Release(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
