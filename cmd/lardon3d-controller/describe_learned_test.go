package main

import (
	"strings"
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// With a single batch size seen, describe shows the peak at that size as
// the measurement, consistent with the suggested block (the peak as a
// fixed cost), not a fixed/per-item split the history cannot make.
func TestDescribeLearnedOneBatchSize(t *testing.T) {
	book := history.NewBook(0, history.Params{})
	for range 4 {
		book.Add("custom/x", history.Record{Items: 8, Threads: 1, PeakMemoryBytes: 800 << 20, Duration: 1e9})
	}
	e := reconcile.EstimateOf(book, "custom/x")
	if e.Note == "" {
		t.Fatalf("estimate %+v: want the single-size note", e)
	}
	var b strings.Builder
	sp := v1alpha1.TaskSpec{Command: []string{"x"}}
	describeLearned(&b, &sp, &v1alpha1.TaskStatus{}, &e)
	out := b.String()
	if !strings.Contains(out, "peak 800.0MiB at batches of 8 items") || strings.Contains(out, "per item + ") {
		t.Fatalf("describe:\n%s", out)
	}
	// Several sizes: the fitted split.
	book.Add("custom/x", history.Record{Items: 16, Threads: 1, PeakMemoryBytes: 1500 << 20, Duration: 2e9})
	e = reconcile.EstimateOf(book, "custom/x")
	b.Reset()
	describeLearned(&b, &sp, &v1alpha1.TaskStatus{}, &e)
	if out := b.String(); !strings.Contains(out, "per item + ") {
		t.Fatalf("describe with two sizes:\n%s", out)
	}
}

// A profile whose larger batches cost more per item: describe gives the
// cap the learner applies (the largest batch within 5 % of the least time
// per item: 44 where n* is 22) and how the task's items left are evened
// out under it (64: two batches of 32).
func TestDescribeLearnedEfficientSplit(t *testing.T) {
	e := reconcile.ProfileEstimate{Total: 12, Samples: 12, EfficientBatch: 22, BatchCost: history.BatchCost{Fixed: 1, PerItem: 0.38, PerItemSquared: 1.0 / 484}}
	sp := v1alpha1.TaskSpec{Command: []string{"x"}}
	for _, tc := range []struct {
		done       int64
		want, lack string
	}{
		{0, "capped at 44, the largest batch within 5% of the least time per item: the 64 items left run in 2 even batches of at most 32", ""},
		{40, "batches above 22 items cost more time per item; capped at 44", "items left run in"},
	} {
		var b strings.Builder
		describeLearned(&b, &sp, &v1alpha1.TaskStatus{Progress: v1alpha1.Progress{ItemsTotal: 64, ItemsDone: tc.done}}, &e)
		if !strings.Contains(b.String(), tc.want) || (tc.lack != "" && strings.Contains(b.String(), tc.lack)) {
			t.Errorf("%d items done: describe lacks %q or holds %q:\n%s", tc.done, tc.want, tc.lack, b.String())
		}
	}
}
