package share

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

var t0 = time.Unix(1_700_000_000, 0)

// The closed form equals the decayed integral summed in small steps,
// whatever instants it is read at, and usage halves each half-life once
// nothing is held.
func TestUsageIsTheDecayedIntegralOfWhatIsHeld(t *testing.T) {
	l := New(Config{HalfLife: time.Hour})
	l.Hold("a", governor.Contract{MemoryBytes: 1 << 30}, t0)
	for i := 1; i <= 90; i++ { // reading often changes nothing
		_ = l.Usage("a", t0.Add(time.Duration(i)*time.Minute))
	}
	l.Release("a", governor.Contract{MemoryBytes: 1 << 30}, t0.Add(90*time.Minute))
	// Numerically: 1 GiB held for 90 min, read at 150 min.
	var want float64
	const step = time.Second
	at := t0.Add(150 * time.Minute)
	for s := t0; s.Before(t0.Add(90 * time.Minute)); s = s.Add(step) {
		want += float64(1<<30) * step.Seconds() * math.Exp2(-at.Sub(s.Add(step/2)).Seconds()/3600)
	}
	got := l.Usage("a", at)
	if math.Abs(got-want) > 1e-6*want {
		t.Fatalf("usage %g, want %g", got, want)
	}
	if later := l.Usage("a", at.Add(time.Hour)); math.Abs(later-got/2) > 1e-9*got {
		t.Errorf("an hour later %g, want half of %g", later, got)
	}
	if l.Usage("nobody", at) != 0 {
		t.Error("an unknown account used something")
	}
}

// Standings give each account its fraction of the shares among those
// compared and of their usage; Key orders by usage per share.
func TestStandingsAndKey(t *testing.T) {
	l := New(Config{Shares: map[string]float64{"c": 2, "bad": -1}})
	l.Hold("a", governor.Contract{MemoryBytes: 100}, t0)
	l.Hold("c", governor.Contract{MemoryBytes: 100}, t0)
	now := t0.Add(time.Minute)
	st := l.Standings([]string{"c", "a", "b", "a"}, now)
	if len(st) != 3 || st[0].Account != "a" || st[2].Account != "c" {
		t.Fatalf("standings %+v", st)
	}
	if st[0].ShareFraction != 0.25 || st[2].ShareFraction != 0.5 || st[0].UsageFraction != 0.5 || st[1].UsageFraction != 0 {
		t.Errorf("fractions %+v", st)
	}
	if !st[1].Below() || st[0].Below() || st[2].Below() {
		t.Errorf("below: %+v", st)
	}
	if l.Key("c", now) >= l.Key("a", now) || l.Shares("bad") != DefaultShares {
		t.Errorf("keys a %g c %g; a negative share must count as the default", l.Key("a", now), l.Key("c", now))
	}
}

// Over names the cap crossed, with the numbers, and nothing below it.
func TestOverNamesTheQuota(t *testing.T) {
	l := New(Config{Quotas: map[string]Quota{"a": {MemoryBytes: 3 << 30, Running: 1, GPUSlots: 1}}})
	c := governor.Contract{MemoryBytes: 2 << 30}
	if msg := l.Over("a", c, true); msg != "" {
		t.Fatalf("first: %q", msg)
	}
	l.Started("a", t0)
	l.Hold("a", c, t0)
	if msg := l.FullAt("a"); msg != "a's quota: running tasks 1 of 1" {
		t.Errorf("FullAt: %q", msg)
	}
	msg := l.Over("a", c, false)
	if !strings.Contains(msg, "memory 2.0GiB held + 2.0GiB asked > 3.0GiB") || strings.Contains(msg, "running") {
		t.Errorf("over memory: %q", msg)
	}
	if msg := l.Over("a", governor.Contract{GPUSlots: 2}, false); !strings.Contains(msg, "GPU slots 0 held + 2 asked > 1") {
		t.Errorf("over GPU slots: %q", msg)
	}
	if msg := l.Over("b", c, true); msg != "" {
		t.Errorf("an account without quota: %q", msg)
	}
	l.Release("a", c, t0)
	l.Ended("a", t0)
	if msg := l.Over("a", c, true); msg != "" || l.FullAt("a") != "" {
		t.Errorf("after release: %q", msg)
	}
}
