package spool

import (
	"math"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// statusBlock renders "status:" and the indented status for this document.
func (d *doc) statusBlock(status *v1alpha1.TaskStatus) []byte {
	return appendStatusBlock(make([]byte, 0, 512), strings.Repeat(" ", d.indent), d.nl, status)
}

// TestEmitCheckedOncePerShape: blocks that differ only in their scalars'
// values share a shape and are parsed by the self-check once; another
// field present, another condition, a string that needs quoting instead
// of a plain one, another indentation, each is a new shape, checked.
func TestEmitCheckedOncePerShape(t *testing.T) {
	checkedShapes.Lock()
	checkedShapes.m = nil
	checkedShapes.Unlock()
	base := benchStatus()
	checks := func(pad string, st *v1alpha1.TaskStatus) int64 {
		t.Helper()
		before := fullChecks.Load()
		block, err := emitChecked(pad, "\n", st)
		if err != nil {
			t.Fatal(err)
		}
		if want := appendStatusBlock(nil, pad, "\n", st); string(block) != string(want) {
			t.Fatalf("emitChecked's block differs from appendStatusBlock's:\n%s\n%s", block, want)
		}
		return fullChecks.Load() - before
	}
	if n := checks("", base); n != 1 {
		t.Errorf("first block: %d full checks, want 1", n)
	}
	for i := range 5 {
		st := base.DeepCopy()
		st.Progress.ItemsDone = int64(i * 7)
		st.Conditions[0].Message = "batch " + strings.Repeat("x", i+1) + " of 128"
		st.Conditions[0].LastTransitionTime = metav1.NewTime(time.Date(2027, 1, i+1, 3, 4, 5, 0, time.UTC))
		if n := checks("", st); n != 0 {
			t.Errorf("values changed only (%d): %d full checks, want 0", i, n)
		}
	}
	for name, change := range map[string]func(*v1alpha1.TaskStatus){
		"a field appears":    func(st *v1alpha1.TaskStatus) { st.CompletionTime = &st.Conditions[0].LastTransitionTime },
		"one condition more": func(st *v1alpha1.TaskStatus) { st.Conditions = append(st.Conditions, st.Conditions[0]) },
		"a quoted string":    func(st *v1alpha1.TaskStatus) { st.Conditions[0].Message = "a: b # c" },
		"a field goes":       func(st *v1alpha1.TaskStatus) { st.LogFile = "" },
		"a null time":        func(st *v1alpha1.TaskStatus) { st.Conditions[0].LastTransitionTime = metav1.Time{} },
	} {
		st := base.DeepCopy()
		change(st)
		if n := checks("", st); n != 1 {
			t.Errorf("%s: %d full checks, want 1 (a new shape)", name, n)
		}
	}
	if n := checks("  ", base); n != 1 {
		t.Errorf("another indentation: %d full checks, want 1", n)
	}
}

// FuzzEmitScalars: whatever the strings, numbers and times in a status's
// fields, the emitted block passes the full self-check: the text of each
// kind of scalar is right for every value, so checking a block's shape
// once (emitChecked) loses nothing.
func FuzzEmitScalars(f *testing.F) {
	for _, s := range []string{"", "plain words", "a: b", "# c", "- d", "yes", "No", "null", "~", "0x1f", "1e5", "0777", ".inf",
		"  lead", "trail ", "tab\there", "line\nbreak", "cr\r", "\u0085nel", "\u2028ls", "\ufeffbom", "\xff\xfe bad utf8",
		`quote " and \ backslash`, "{flow: map}", "[flow, seq]", "&anchor *alias", "!!tag", "%directive", "@at `tick`",
		"é unicode ✓", "\x00nul\x1f\x7f\u009f", "---", "...", "'single'", "abcdef0123", "0b1010", "deadbeef"} {
		f.Add(s, s, int64(len(s)), int64(1700000000+len(s)), uint64(len(s)))
	}
	f.Add("x", "y", int64(math.MinInt64), int64(-62135596800), uint64(math.MaxUint64))
	f.Add("x", "y", int64(math.MaxInt64), int64(253402300799), uint64(0))
	f.Fuzz(func(t *testing.T, a, b string, n, sec int64, u uint64) {
		at := metav1.NewTime(time.Unix(sec, 0))
		q := resource.NewQuantity(n, resource.BinarySI)
		st := &v1alpha1.TaskStatus{
			Phase: v1alpha1.Phase(a), ObservedGeneration: n, SpecHash: b, QueueSeq: n, LogFile: a + b,
			Conditions:   []metav1.Condition{{Type: a, Status: metav1.ConditionStatus(b), Reason: b, Message: a, LastTransitionTime: at, ObservedGeneration: n}},
			Progress:     v1alpha1.Progress{ItemsDone: n, ItemsTotal: n, BatchesDone: n, InputsHash: b},
			Reservation:  &v1alpha1.Contract{Batch: n, BatchRequested: n, Threads: int32(n % 1024), Memory: *q, GrantedAt: at, ScratchDir: b},
			StartTime:    &at,
			ProcessGroup: &v1alpha1.ProcessGroupRef{PGID: int(n % math.MaxInt32), StartTicks: u},
		}
		if _, err := st.Conditions[0].LastTransitionTime.MarshalJSON(); err != nil {
			return // a time JSON cannot carry (year out of range): not a status
		}
		for _, pad := range []string{"", "  "} {
			for _, nl := range []string{"\n", "\r\n"} {
				if err := checkBlock(appendStatusBlock(nil, pad, nl, st), st); err != nil {
					t.Fatalf("pad %q nl %q: %v\n%s", pad, nl, err, appendStatusBlock(nil, pad, nl, st))
				}
			}
		}
	})
}
