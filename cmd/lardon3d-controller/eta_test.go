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
	if got, want := reconcile.ETA(60, learned), 125*time.Second; got != want {
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
	if d, ok := reconcile.TaskETA(rowOf(st), nil, now); !ok || d != 900*time.Second {
		t.Fatalf("ETA from the batch's pace: %v %v, want 15m0s", d, ok)
	}
	// The profile prices the items after the batch: 400 s + 5 s + 50×2 s.
	learned := &reconcile.ProfileEstimate{DurationFixed: 5 * time.Second, DurationPerItem: 2 * time.Second}
	if d, ok := reconcile.TaskETA(rowOf(st), learned, now); !ok || d != 505*time.Second {
		t.Fatalf("ETA with a profile: %v %v, want 8m25s", d, ok)
	}
	if row, _, _, _ := statusCells(rowOf(st), nil, now); !strings.Contains(row, "0/100 +10") {
		t.Errorf("progress %q: want the reported items beside the committed ones", row)
	}
	// A task back to Pending (its controller died mid-batch) has no batch
	// in flight, whatever its status still says.
	st.Phase = v1alpha1.PhasePending
	if row, _, _, _ := statusCells(rowOf(st), nil, now); strings.Contains(row, "+10") {
		t.Errorf("row %q: a pending task shows a report", row)
	}
	st.Phase = v1alpha1.PhaseRunning
	// Once the batch ended, its report is history: nothing is priced by it.
	ended := metav1.NewTime(now)
	st.LastBatch.EndTime = &ended
	if _, ok := reconcile.TaskETA(rowOf(st), nil, now); ok {
		t.Errorf("an ended batch's report still gives an ETA")
	}
	if row, _, _, _ := statusCells(rowOf(st), nil, now); strings.Contains(row, "+10") {
		t.Errorf("row %q: an ended batch's report is shown", row)
	}
}

// TestProgressByTheClockForABatchThatReportsNothing (issue 33, point 5):
// a batch whose command reports no progress (COLMAP buffers its output)
// is timed against the profile's history: get's PROGRESS shows the share
// of the expected time it has run (at most 99% until it exits), the ETA
// what is left of it plus the items after it, and describe says both;
// with no history, or paused, they stay "-". The clock is fixed.
func TestProgressByTheClockForABatchThatReportsNothing(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-10 * time.Minute))
	st := v1alpha1.TaskStatus{
		Phase:     v1alpha1.PhaseRunning,
		Progress:  v1alpha1.Progress{ItemsDone: 0, ItemsTotal: 3},
		LastBatch: &v1alpha1.BatchRecord{Index: 0, Start: 0, Size: 1, StartTime: &started},
	}
	// The profile's batches: 2m per batch + 18m per item, 20m for one.
	learned := &reconcile.ProfileEstimate{Profile: "matching/colmap", DurationFixed: 2 * time.Minute, DurationPerItem: 18 * time.Minute}
	row := rowOf(st)
	if progress, _, _, _ := statusCells(row, learned, now); progress != "0/3 ~50%" {
		t.Errorf("PROGRESS %q, want 0/3 ~50%%", progress)
	}
	// 10m left of this batch, then 2 items: 2m + 2×18m.
	if d, ok := reconcile.TaskETA(row, learned, now); !ok || d != 48*time.Minute {
		t.Errorf("ETA %v %v, want 48m0s", d, ok)
	}
	if cols := wideColumns(row, learned, now); !strings.Contains(cols, "\t48m\t") {
		t.Errorf("wide columns %q: want the ETA 48m", cols)
	}
	var b strings.Builder
	st.Reservation = &v1alpha1.Contract{Batch: 1, BatchRequested: 1, Threads: 1}
	describe(&b, taskFile("t.yaml", &v1alpha1.Task{Metadata: v1alpha1.ObjectMeta{Name: "t"}, Status: st}), learned, spoolController{}, now)
	for _, want := range []string{
		"~50%: no progress reported; it has run 10m0s of the 20m0s a batch of 1 item takes at the profile's pace",
		"ETA:            48m0s for 3 items left (the profile's 2m0s per batch and 18m0s per item, less the running batch's time so far)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, b.String())
		}
	}
	// Past the expected time: 99%, never 100% before it exits; the
	// batch's part of the ETA is spent.
	late := now.Add(time.Hour)
	if progress, _, _, _ := statusCells(row, learned, late); progress != "0/3 ~99%" {
		t.Errorf("PROGRESS past the expected time %q, want 0/3 ~99%%", progress)
	}
	if d, ok := reconcile.TaskETA(row, learned, late); !ok || d != 38*time.Minute {
		t.Errorf("ETA past the expected time %v %v, want 38m0s", d, ok)
	}
	// No history: nothing to time it against.
	if progress, _, _, _ := statusCells(row, nil, now); progress != "0/3" {
		t.Errorf("PROGRESS with no history %q, want 0/3", progress)
	}
	if _, ok := reconcile.TaskETA(row, nil, now); ok {
		t.Error("an ETA with no history")
	}
	// Paused: the clock says nothing of the batch.
	st.Phase = v1alpha1.PhasePaused
	if progress, _, _, _ := statusCells(rowOf(st), learned, now); progress != "0/3" {
		t.Errorf("PROGRESS of a paused batch %q, want 0/3", progress)
	}
	// Resumed after 5 minutes stopped: 5 of its 10 minutes ran.
	st.Phase = v1alpha1.PhaseRunning
	st.LastBatch.PausedSeconds = 300
	if progress, _, _, _ := statusCells(rowOf(st), learned, now); progress != "0/3 ~25%" {
		t.Errorf("PROGRESS after a 5m pause %q, want 0/3 ~25%%", progress)
	}
}
