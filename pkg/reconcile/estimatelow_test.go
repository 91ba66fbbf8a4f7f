package reconcile

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// TestReservedTextSaysWhereTheAmountCameFrom: the EstimateTooLow message
// says "the declared costs reserved X" only when X is what was declared;
// a reservation raised above the declaration (a retry after a kill, or
// the profile's measured need) says both amounts (issue 33: "the declared
// costs reserved 188.0MiB" when 80Mi was declared).
func TestReservedTextSaysWhereTheAmountCameFrom(t *testing.T) {
	mi := func(n int64) *resource.Quantity { return resource.NewQuantity(n<<20, resource.BinarySI) }
	task := func(mode v1alpha1.EstimateMode, fixed *resource.Quantity) *v1alpha1.Task {
		tk := &v1alpha1.Task{}
		tk.Spec.Resources.Fixed.Memory = fixed
		tk.Spec.Resources.Estimate = mode
		v1alpha1.SetDefaults(tk, "t.yaml")
		return tk
	}
	batch := func(reserved int64, attempt int) *queue.Batch {
		return &queue.Batch{Size: 1, Total: 4, Attempt: attempt, Contract: governor.Contract{Threads: 1, MemoryBytes: reserved << 20}}
	}
	for _, tc := range []struct {
		task *v1alpha1.Task
		b    *queue.Batch
		want string
	}{
		{task(v1alpha1.EstimateDeclared, mi(80)), batch(80, 1), "the declared costs reserved 80.0MiB"},
		{task(v1alpha1.EstimateDeclared, mi(80)), batch(188, 2), "it had 188.0MiB reserved (declared 80.0MiB, bumped after an earlier kill)"},
		{task(v1alpha1.EstimateDeclared, mi(80)), batch(188, 1), "it had 188.0MiB reserved (declared 80.0MiB, raised to the measured need)"},
		{task(v1alpha1.EstimateDeclared, nil), batch(188, 1), "it had 188.0MiB reserved (no memory declared)"},
		{task(v1alpha1.EstimateLearned, mi(80)), batch(188, 2), "the learned estimate reserved 188.0MiB"},
	} {
		if got := (advisor{e: &entry{task: tc.task}}).reservedText(tc.b); got != tc.want {
			t.Errorf("%s, %s reserved, attempt %d: %q, want %q", tc.task.Spec.Resources.Estimate,
				governor.FormatBytes(tc.b.Contract.MemoryBytes), tc.b.Attempt, got, tc.want)
		}
	}
}
