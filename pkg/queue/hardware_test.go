package queue

import (
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// TestHardwareRejectionsAreOfferedAgainOnAGenerationChange: a task the
// governor rejected for hardware goes back to Pending by itself when
// Admitter.Changed closes, and runs once the governor admits it; so does a
// task handed as terminal with a hardware TerminalReason (a restart). A
// dependency cycle and a non-hardware terminal reason are not re-offered.
func TestHardwareRejectionsAreOfferedAgainOnAGenerationChange(t *testing.T) {
	est := governor.Estimate{Class: "gpu", FixedMemory: 10, BatchMin: 1, BatchMax: 1, Threads: 1, MinThreads: 1}
	h := newHarness(t, Config{}, 100)
	h.adm.mu.Lock()
	h.adm.rejectFor["gpu"] = true // the fake rejects as ExceedsCapacity
	h.adm.mu.Unlock()
	for _, tk := range []Task{
		{Name: "gpu", Seq: 1, ItemsTotal: 1, Estimate: est, Generation: 1},
		{Name: "restarted", Seq: 2, ItemsTotal: 1, Estimate: est, Generation: 1, Terminal: v1alpha1.PhaseRejected, TerminalReason: string(governor.ReasonNoGPU)},
		{Name: "invalid", Seq: 3, ItemsTotal: 1, Estimate: est, Generation: 1, Terminal: v1alpha1.PhaseRejected, TerminalReason: v1alpha1.ReasonInvalidSpec},
		{Name: "cyc", Seq: 4, ItemsTotal: 1, Estimate: est, Generation: 1, DependsOn: []string{"cyc"}},
	} {
		if err := h.q.Upsert(tk); err != nil {
			t.Fatal(err)
		}
	}
	h.obs.waitPhase(t, "gpu", v1alpha1.PhaseRejected)
	h.obs.waitPhase(t, "cyc", v1alpha1.PhaseRejected)

	h.adm.mu.Lock()
	h.adm.rejectFor["gpu"] = false // the GPU appeared
	h.adm.mu.Unlock()
	h.adm.bump()
	for _, name := range []string{"gpu", "restarted"} {
		ev := h.obs.waitPhase(t, name, v1alpha1.PhasePending)
		if ev.Reason != ReasonHardwareChanged {
			t.Errorf("%s: back to Pending with reason %q, want %s", name, ev.Reason, ReasonHardwareChanged)
		}
		h.run.nth(t, name, 0).ok()
		h.obs.waitPhase(t, name, v1alpha1.PhaseDone)
	}
	for _, name := range []string{"invalid", "cyc"} {
		if st := stateOf(h.q, name); st.Phase != v1alpha1.PhaseRejected {
			t.Errorf("%s: %s, want still Rejected", name, st.Phase)
		}
	}
}
