package main

import (
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

func TestETAFromTheProfilesTimePerItem(t *testing.T) {
	tk := &v1alpha1.Task{Status: v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, Progress: v1alpha1.Progress{ItemsDone: 40, ItemsTotal: 100}}}
	learned := &reconcile.ProfileEstimate{DurationFixed: 5 * time.Second, DurationPerItem: 2 * time.Second}
	if got, want := eta(60, learned), 125*time.Second; got != want {
		t.Fatalf("eta of 60 items at 2s + 5s: %v, want %v", got, want)
	}
	if cols := wideColumns(tk, learned); !strings.Contains(cols, "\t2m5s\t") {
		t.Errorf("wide columns %q: want the ETA 2m5s", cols)
	}
	tk.Status.Phase = v1alpha1.PhaseDone
	if cols := wideColumns(tk, learned); !strings.Contains(cols, "\t-\t-") {
		t.Errorf("a Done task has an ETA: %q", cols)
	}
	if cols := wideColumns(tk, nil); strings.Count(cols, "-") < 4 {
		t.Errorf("no history, columns %q", cols)
	}
}
