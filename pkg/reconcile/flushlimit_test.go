package reconcile

import (
	"testing"
	"time"
)

// TestLimitDueKeepsCommitsThenPhaseChanges: a bounded flush writes
// committed progress first, then phase changes oldest first, then the rest.
func TestLimitDueKeepsCommitsThenPhaseChanges(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var due []*pendingWrite
	for i := 0; i < 10; i++ {
		due = append(due, &pendingWrite{name: "progress", lastWrite: t0.Add(time.Duration(i) * time.Second)})
		due = append(due, &pendingWrite{name: "phase", urgentAt: t0.Add(time.Duration(10-i) * time.Second)})
	}
	due = append(due, &pendingWrite{name: "commit", commit: true, urgentAt: t0.Add(time.Hour)})
	kept, left := limitDue(due, 6)
	if len(kept) != 6 || left != 15 {
		t.Fatalf("kept %d, left %d; want 6 and 15", len(kept), left)
	}
	if kept[0].name != "commit" {
		t.Errorf("first kept %q, want the commit", kept[0].name)
	}
	for i, e := range kept[1:] {
		if e.name != "phase" || (i > 0 && e.urgentAt.Before(kept[i].urgentAt)) {
			t.Errorf("kept[%d] = %q at %v: want phase changes, oldest first", i+1, e.name, e.urgentAt)
		}
	}
	if all, left := limitDue(due[:3], 6); len(all) != 3 || left != 0 {
		t.Errorf("under the bound: kept %d, left %d", len(all), left)
	}
}
