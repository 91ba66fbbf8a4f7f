package reconcile

import (
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

// ETA is the time the items left take at the profile's pace, one batch's
// fixed time included.
func ETA(left int64, e *ProfileEstimate) time.Duration {
	return e.DurationFixed + time.Duration(left)*e.DurationPerItem
}

// RunningReport is what the batch in flight has reported of its items
// (LARDON3D_PROGRESS), with how long it has run; ok is false when it
// reported nothing.
func RunningReport(r *listing.Row, now time.Time) (reported, size int64, ran time.Duration, ok bool) {
	lb := r.LastBatch
	if r.Phase != v1alpha1.PhaseRunning && r.Phase != v1alpha1.PhasePaused {
		return 0, 0, 0, false
	}
	if lb == nil || lb.End >= 0 || lb.ItemsReported < 0 || lb.Start < 0 {
		return 0, 0, 0, false
	}
	return lb.ItemsReported, lb.Size, now.Sub(time.Unix(lb.Start, 0)), true
}

// TaskETA estimates when a task not ended will be done. The profile's time
// per item (learned) prices the items left; while the batch in flight
// reports progress, its own pace prices the rest of that batch, and the
// items after it when the profile has no time yet (an hours-long first
// batch is not "unknown" for hours). ok is false when nothing is known.
func TaskETA(r *listing.Row, learned *ProfileEstimate, now time.Time) (time.Duration, bool) {
	if v1alpha1.IsTerminal(r.Phase) {
		return 0, false
	}
	left := r.Total - r.Done
	if left <= 0 {
		return 0, false
	}
	profile := learned != nil && learned.DurationPerItem > 0
	reported, size, ran, running := RunningReport(r, now)
	if !running || reported <= 0 {
		if elapsed, expected, ok := ExpectedRun(r, learned, now); ok {
			// A batch that reports nothing: what its size takes at the
			// profile's pace, less the time it has run.
			return max(0, expected-elapsed) + eta0(max(0, left-r.LastBatch.Size), learned), true
		}
		if !profile {
			return 0, false
		}
		return ETA(left, learned), true
	}
	perItem := ran / time.Duration(reported)
	inBatch := time.Duration(size-reported) * perItem
	after := max(0, left-size)
	if after == 0 {
		return inBatch, true
	}
	if profile {
		return inBatch + ETA(after, learned), true
	}
	return inBatch + time.Duration(after)*perItem, true
}

// eta0 is ETA, nothing for no items.
func eta0(left int64, e *ProfileEstimate) time.Duration {
	if left <= 0 {
		return 0
	}
	return ETA(left, e)
}

// ExpectedRun is how long the batch in flight has run and how long the
// profile's batches of its size took (its fixed time and its time per
// item), for a batch that reports no progress (LARDON3D_PROGRESS): the
// clock against the history, as GNU parallel's --eta does. ok is false
// when the task is not Running (paused, the clock says nothing of the
// batch), when the batch reports its items, or when the profile has no
// time yet.
func ExpectedRun(r *listing.Row, learned *ProfileEstimate, now time.Time) (elapsed, expected time.Duration, ok bool) {
	lb := r.LastBatch
	if r.Phase != v1alpha1.PhaseRunning || lb == nil || lb.End >= 0 || lb.Start < 0 || lb.Size <= 0 || lb.ItemsReported > 0 {
		return 0, 0, false
	}
	if learned == nil || learned.DurationPerItem <= 0 && learned.DurationFixed <= 0 {
		return 0, 0, false
	}
	expected = learned.DurationFixed + time.Duration(lb.Size)*learned.DurationPerItem
	if expected <= 0 {
		return 0, 0, false
	}
	// The clock of a batch stops while it is paused.
	return max(0, now.Sub(time.Unix(lb.Start, 0))-time.Duration(lb.Paused)*time.Second), expected, true
}

// ExpectedPercent is elapsed against expected in percent, at most 99
// while the batch runs: only its exit says it is done.
func ExpectedPercent(elapsed, expected time.Duration) int64 {
	return min(99, int64(100*elapsed.Seconds()/expected.Seconds()))
}
