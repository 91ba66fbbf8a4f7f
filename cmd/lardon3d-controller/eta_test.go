package main

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

func TestETAFromTheProfilesTimePerItem(t *testing.T) {
	tk := &v1alpha1.Task{Status: v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, Progress: v1alpha1.Progress{ItemsDone: 40, ItemsTotal: 100}}}
	learned := &reconcile.ProfileEstimate{DurationFixed: 5 * time.Second, DurationPerItem: 2 * time.Second}
	if got, want := eta(60, learned), 125*time.Second; got != want {
		t.Fatalf("eta of 60 items at 2s + 5s: %v, want %v", got, want)
	}
	row := *taskFile("", tk).Row
	if cols := wideColumns(&row, learned, time.Now()); !strings.Contains(cols, "\t2m5s\t") {
		t.Errorf("wide columns %q: want the ETA 2m5s", cols)
	}
	tk.Status.Phase = v1alpha1.PhaseDone
	row = *taskFile("", tk).Row
	if cols := wideColumns(&row, learned, time.Now()); !strings.Contains(cols, "\t-\t-") {
		t.Errorf("a Done task has an ETA: %q", cols)
	}
	if cols := wideColumns(&row, nil, time.Now()); strings.Count(cols, "-") < 4 {
		t.Errorf("no history, columns %q", cols)
	}
}

// rowOf is the Row of a task called t with status st.
func rowOf(st v1alpha1.TaskStatus) *listing.Row {
	return taskFile("", &v1alpha1.Task{Metadata: v1alpha1.ObjectMeta{Name: "t"}, Status: st}).Row
}

// TestETAFromTheRunningBatchsReports: a first batch with no history yet is
// priced by its own reported pace, and its uncommitted items show in the
// progress column.
func TestETAFromTheRunningBatchsReports(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-100 * time.Second))
	reported := int64(10)
	st := v1alpha1.TaskStatus{
		Phase:     v1alpha1.PhaseRunning,
		Progress:  v1alpha1.Progress{ItemsDone: 0, ItemsTotal: 100},
		LastBatch: &v1alpha1.BatchRecord{Index: 0, Start: 0, Size: 50, StartTime: &started, ItemsReported: &reported},
	}
	// 10 items in 100 s: 40 left in the batch at 10 s, 50 after it.
	if d, ok := taskETA(rowOf(st), nil, now); !ok || d != 900*time.Second {
		t.Fatalf("ETA from the batch's pace: %v %v, want 15m0s", d, ok)
	}
	// The profile prices the items after the batch: 400 s + 5 s + 50×2 s.
	learned := &reconcile.ProfileEstimate{DurationFixed: 5 * time.Second, DurationPerItem: 2 * time.Second}
	if d, ok := taskETA(rowOf(st), learned, now); !ok || d != 505*time.Second {
		t.Fatalf("ETA with a profile: %v %v, want 8m25s", d, ok)
	}
	if row, _, _, _ := statusCells(rowOf(st), now); !strings.Contains(row, "0/100 +10") {
		t.Errorf("progress %q: want the reported items beside the committed ones", row)
	}
	// A task back to Pending (its controller died mid-batch) has no batch
	// in flight, whatever its status still says.
	st.Phase = v1alpha1.PhasePending
	if row, _, _, _ := statusCells(rowOf(st), now); strings.Contains(row, "+10") {
		t.Errorf("row %q: a pending task shows a report", row)
	}
	st.Phase = v1alpha1.PhaseRunning
	// Once the batch ended, its report is history: nothing is priced by it.
	ended := metav1.NewTime(now)
	st.LastBatch.EndTime = &ended
	if _, ok := taskETA(rowOf(st), nil, now); ok {
		t.Errorf("an ended batch's report still gives an ETA")
	}
	if row, _, _, _ := statusCells(rowOf(st), now); strings.Contains(row, "+10") {
		t.Errorf("row %q: an ended batch's report is shown", row)
	}
}
