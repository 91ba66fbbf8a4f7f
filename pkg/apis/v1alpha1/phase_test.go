package v1alpha1

import "testing"

// allowedMoves are the moves between two different phases the Phase doc
// comments allow, written from them ("" is a task never written).
var allowedMoves = func() map[[2]Phase]bool {
	const (
		P, Rs, R, Pa, D, F, Rj = PhasePending, PhaseReserved, PhaseRunning, PhasePaused, PhaseDone, PhaseFailed, PhaseRejected
	)
	return map[[2]Phase]bool{
		{"", P}: true, {"", Rj}: true,
		{P, Rs}: true, {P, Rj}: true, {P, F}: true, {P, D}: true,
		{Rs, R}: true, {Rs, Pa}: true, {Rs, P}: true, {Rs, F}: true,
		{R, Pa}: true, {R, D}: true, {R, F}: true, {R, P}: true,
		{Pa, R}: true, {Pa, P}: true, {Pa, F}: true, {Pa, D}: true,
		{D, P}: true, {D, Rj}: true,
		{F, P}: true, {F, Rj}: true,
		{Rj, P}: true,
	}
}()

// TestAllowedTransition walks every (from, to) pair of phases, "" included,
// against allowedMoves.
func TestAllowedTransition(t *testing.T) {
	all := append([]Phase{""}, Phases...)
	n := 0
	for _, from := range all {
		for _, to := range all {
			want := allowedMoves[[2]Phase{from, to}] || (from == to && from != "")
			if got := AllowedTransition(from, to); got != want {
				t.Errorf("AllowedTransition(%q, %q) = %v, want %v", from, to, got, want)
			}
			n++
		}
	}
	if n != 64 {
		t.Fatalf("walked %d pairs", n)
	}
	for _, p := range []Phase{"Bogus", "pending"} {
		if AllowedTransition(PhasePending, p) || AllowedTransition(p, PhasePending) || AllowedTransition(p, p) {
			t.Errorf("unknown phase %q allowed", p)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	for _, p := range append([]Phase{"", "Bogus"}, Phases...) {
		want := p == PhaseDone || p == PhaseFailed || p == PhaseRejected
		if IsTerminal(p) != want {
			t.Errorf("IsTerminal(%q) = %v", p, !want)
		}
		// A terminal phase leaves only for Pending or Rejected (a spec edit).
		if IsTerminal(p) {
			for _, to := range Phases {
				if AllowedTransition(p, to) && to != p && to != PhasePending && to != PhaseRejected {
					t.Errorf("terminal %s may move to %s", p, to)
				}
			}
		}
	}
}
