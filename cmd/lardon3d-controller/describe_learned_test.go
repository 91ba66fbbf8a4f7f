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
