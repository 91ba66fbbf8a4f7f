package governor

import (
	"regexp"
	"strings"
	"testing"
)

// TestAScratchVolumeOfUnknownFreeSpaceMakesDemandsWait: a volume reported
// Unknown stays in the registry (its leases stay), grants nothing, and a
// scratch demand waits (ScratchUnknown) instead of being rejected; its
// measure coming back bumps the generation, waking the waiters, and admits.
func TestAScratchVolumeOfUnknownFreeSpaceMakesDemandsWait(t *testing.T) {
	g := New(Config{MemoryReserved: -1, LoadThreshold: -1})
	measured := snap(func(s *Snapshot) { s.Scratch = []ScratchVolume{{Path: "/scratch", FreeBytes: 10 * Gi}} })
	g.Update(*measured)
	need := est(func(e *Estimate) { e.ScratchBytes = Gi })
	if d := g.Decide(need); d.Verdict != Admit {
		t.Fatalf("measured volume: %s", d)
	}
	gen, changed := g.Generation(), g.Changed()
	g.Update(*snap(func(s *Snapshot) { s.Scratch = []ScratchVolume{{Path: "/scratch", Unknown: true}} }))
	if d := g.Decide(need); d.Verdict != Wait || d.Reason != ReasonScratchUnknown || d.Budget != BudgetScratch {
		t.Fatalf("unknown volume: %s, want WAIT ScratchUnknown", d)
	} else if m := d.Message(); m == "" || m == "scratchunknown" {
		t.Errorf("message %q", m)
	}
	if b := g.Budgets(); len(b.Scratch) != 1 || !b.Scratch[0].Present || !b.Scratch[0].Unknown {
		t.Errorf("budgets: %+v", b.Scratch)
	}
	if g.Generation() == gen {
		t.Error("a volume becoming unmeasurable did not bump the generation")
	}
	select {
	case <-changed:
	default:
		t.Error("Changed not closed")
	}
	gen = g.Generation()
	g.Update(*measured)
	if d := g.Decide(need); d.Verdict != Admit {
		t.Fatalf("measured again: %s", d)
	}
	if g.Generation() == gen {
		t.Error("a volume measured again did not bump the generation")
	}
	// A volume gone altogether is no scratch at all: that is a Reject,
	// re-evaluated by the queue at the next generation change.
	g.Update(*snap(nil))
	if d := g.Decide(need); d.Verdict != Reject || d.Reason != ReasonNoScratch {
		t.Fatalf("no volume: %s, want REJECT NoScratch", d)
	}
}

// TestUpdateReportsFreedHeadroomOnly: Update says "freed" when grantable RAM
// grew by max(64MiB, 1% of capacity) or more, not for small fluctuations,
// and not for the first snapshot.
func TestUpdateReportsFreedHeadroomOnly(t *testing.T) {
	g := New(Config{MemoryReserved: -1, LoadThreshold: -1})
	base := snap(func(s *Snapshot) { s.MemAvailable = 4 * Gi })
	if g.Update(*base) {
		t.Error("first snapshot reported freed")
	}
	if g.Update(*snap(func(s *Snapshot) { s.MemAvailable = 4*Gi + 10*Mi })) {
		t.Error("+10MiB reported freed")
	}
	if !g.Update(*snap(func(s *Snapshot) { s.MemAvailable = 4*Gi + 200*Mi })) {
		t.Error("+190MiB not reported freed")
	}
	if g.Update(*snap(func(s *Snapshot) { s.MemAvailable = 3 * Gi })) {
		t.Error("a shrink reported freed")
	}
	if !g.Update(*snap(func(s *Snapshot) {
		s.MemAvailable = 3 * Gi
		s.Scratch = []ScratchVolume{{Path: "/s", FreeBytes: Gi}}
	})) {
		// A new volume's space is headroom too.
		t.Error("a new scratch volume not reported freed")
	}
}

// TestLeasePrefixNamesTheLeaseDirectory: the contract's ScratchDir is
// VOLUME/PREFIX+id-NONCE, with the default prefix unless one is given; a
// prefix with a slash is ignored. The nonce differs from lease to lease.
func TestLeasePrefixNamesTheLeaseDirectory(t *testing.T) {
	for _, c := range []struct{ prefix, want string }{
		{"", "/scratch/lardon3d-lease-1"},
		{"lardon3d-lease-0a1b2c3d-00112233aabbccdd-", "/scratch/lardon3d-lease-0a1b2c3d-00112233aabbccdd-1"},
		{"../x-", "/scratch/lardon3d-lease-1"},
	} {
		g := New(Config{MemoryReserved: -1, LoadThreshold: -1}, WithLeasePrefix(c.prefix))
		g.Update(*snap(func(s *Snapshot) { s.Scratch = []ScratchVolume{{Path: "/scratch/", FreeBytes: 10 * Gi}} }))
		_, r, ok := g.Reserve(est(func(e *Estimate) { e.ScratchBytes = Gi }))
		if !ok {
			t.Fatal("not granted")
		}
		got := r.Contract().ScratchDir
		name, nonce, _ := strings.Cut(strings.TrimPrefix(got, c.want), "-")
		if !strings.HasPrefix(got, c.want+"-") || name != "" || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(nonce) {
			t.Errorf("prefix %q: ScratchDir %q, want %q-NONCE", c.prefix, got, c.want)
		}
		_, r2, _ := g.Reserve(est(func(e *Estimate) { e.ScratchBytes = Gi }))
		if again := r2.Contract().ScratchDir; len(again) < 16 || again[len(again)-16:] == nonce {
			t.Errorf("two leases with the same nonce: %s, %s", got, again)
		}
	}
}
