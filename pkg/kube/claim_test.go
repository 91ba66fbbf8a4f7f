package kube_test

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

func taskIn(phase v1alpha1.Phase, holder string) *kubeapi.Task {
	t := &kubeapi.Task{}
	t.Status.Phase = phase
	if holder != "" {
		t.Status.Claim = &kubeapi.Claim{Node: holder, Seq: 1}
	}
	return t
}

func lease(holder string, renewed time.Time, secs int32) *coordinationv1.Lease {
	rt := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &rt, LeaseDurationSeconds: ptr.To(secs)}}
}

// TestWhoMayClaimWhat: the rules Claim and TakeOver apply before writing.
func TestWhoMayClaimWhat(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	live := &kube.Liveness{Now: func() time.Time { return now }}
	// Both renewed at the same time; "dead" was seen unchanged for its
	// whole duration, "alive" was just renewed (a version seen now).
	dead := lease("a", now.Add(-time.Hour), 10)
	dead.Name = "dead"
	live.Expired(dead)
	now = now.Add(10 * time.Second)
	alive := lease("a", now.Add(-time.Hour), 10)
	alive.Name = "alive"
	for _, tc := range []struct {
		name              string
		task              *kubeapi.Task
		lease             *coordinationv1.Lease
		claimable, takeov bool
	}{
		{"new", taskIn("", ""), nil, true, false},
		{"pending", taskIn(v1alpha1.PhasePending, ""), nil, true, false},
		{"running unclaimed (spool-made status)", taskIn(v1alpha1.PhaseRunning, ""), nil, false, false},
		{"running, holder alive", taskIn(v1alpha1.PhaseRunning, "a"), alive, false, false},
		{"running, holder's lease expired exactly now", taskIn(v1alpha1.PhaseRunning, "a"), dead, false, true},
		{"paused, holder has no lease", taskIn(v1alpha1.PhasePaused, "a"), nil, false, true},
		{"reserved, lease held by another identity", taskIn(v1alpha1.PhaseReserved, "a"), lease("b", now, 10), false, true},
		{"done, holder gone", taskIn(v1alpha1.PhaseDone, "a"), dead, false, false},
		{"failed, holder gone", taskIn(v1alpha1.PhaseFailed, "a"), nil, false, false},
	} {
		if got := kube.Claimable(tc.task); got != tc.claimable {
			t.Errorf("%s: Claimable %v, want %v", tc.name, got, tc.claimable)
		}
		if got := kube.TakeOverable(tc.task, tc.lease, live); got != tc.takeov {
			t.Errorf("%s: TakeOverable %v, want %v", tc.name, got, tc.takeov)
		}
	}
	// Whoever holds a task that ended is gone: Reopen (a retried task)
	// claims it again, the holder alive takes the change itself.
	for _, tc := range []struct {
		name  string
		task  *kubeapi.Task
		lease *coordinationv1.Lease
		gone  bool
	}{
		{"done, holder's lease expired", taskIn(v1alpha1.PhaseDone, "a"), dead, true},
		{"failed, holder has no lease", taskIn(v1alpha1.PhaseFailed, "a"), nil, true},
		{"done, holder alive", taskIn(v1alpha1.PhaseDone, "a"), alive, false},
		{"rejected, lease held by another identity", taskIn(v1alpha1.PhaseRejected, "a"), lease("b", now, 10), true},
		{"never claimed", taskIn(v1alpha1.PhaseDone, ""), nil, false},
	} {
		if got := kube.HolderGone(tc.task, tc.lease, live); got != tc.gone {
			t.Errorf("%s: HolderGone %v, want %v", tc.name, got, tc.gone)
		}
	}
	if !live.Expired(&coordinationv1.Lease{}) {
		t.Error("a lease never renewed is alive")
	}
}

// TestLivenessCountsOnItsOwnClock: a Lease expires once this process saw
// it unchanged for its duration on its own clock, whatever clock its
// holder wrote the renewal time with; a Resume (this process was cut off)
// restarts every count.
func TestLivenessCountsOnItsOwnClock(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	live := &kube.Liveness{Now: func() time.Time { return now }}
	behind := lease("behind", now.Add(-time.Hour), 10) // holder's clock an hour late
	behind.Name = "behind"
	ahead := lease("ahead", now.Add(time.Hour), 10) // an hour early
	ahead.Name = "ahead"
	if live.Expired(ahead) {
		t.Fatal("a Lease stamped an hour ahead is expired when first seen")
	}
	for range 5 {
		if live.Expired(behind) {
			t.Fatalf("at %v: a Lease renewed every 5 s, by a clock an hour late, is expired", now)
		}
		now = now.Add(5 * time.Second)
		rt := metav1.NewMicroTime(behind.Spec.RenewTime.Add(5 * time.Second))
		behind.Spec.RenewTime = &rt
	}
	// ahead stopped renewing 25 s ago (seen first then): expired, though
	// its renewal time is still in the future here.
	if !live.Expired(ahead) {
		t.Error("a Lease seen unchanged for 25 s of a 10 s duration is alive because its holder's clock is ahead")
	}
	// behind's last renewal, seen now: alive until 10 s from now, not
	// from its stamp.
	if live.Expired(behind) {
		t.Error("a renewal just seen is expired")
	}
	now = now.Add(9 * time.Second)
	if live.Expired(behind) {
		t.Error("expired 9 s after its last renewal was seen")
	}
	now = now.Add(time.Second)
	if !live.Expired(behind) {
		t.Error("alive 10 s after its last renewal was seen")
	}
	// Cut off: whatever was seen before counts from the Resume.
	live.Resume()
	now = now.Add(9 * time.Second)
	if live.Expired(behind) || live.Expired(ahead) {
		t.Error("expired 9 s after this process came back: it did not watch them for a duration")
	}
	now = now.Add(time.Second)
	if !live.Expired(behind) || !live.Expired(ahead) {
		t.Error("alive a full duration after the Resume with no renewal seen")
	}
	// A nil Liveness has seen nothing.
	var none *kube.Liveness
	if none.Expired(behind) || !none.Expired(&coordinationv1.Lease{}) {
		t.Error("a nil Liveness: a Lease with a holder is alive, one without is expired")
	}
}

// TestClaimWritesPhasesThroughSetPhase: a claim moves a new or Pending
// task to Reserved, a takeover restarts a Running one (→ Pending →
// Reserved) in the same write, and a phase the machine does not know is
// refused with nothing written.
func TestClaimWritesPhasesThroughSetPhase(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kubeapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		from     v1alpha1.Phase
		holder   string
		takeOver bool
		want     v1alpha1.Phase // "": refused
	}{
		{"", "", false, v1alpha1.PhaseReserved},
		{v1alpha1.PhasePending, "", false, v1alpha1.PhaseReserved},
		{v1alpha1.PhaseRunning, "gone", true, v1alpha1.PhaseReserved},
		{v1alpha1.PhasePaused, "gone", true, v1alpha1.PhaseReserved},
		{"Bogus", "gone", true, ""},
	} {
		task := taskIn(tc.from, tc.holder)
		task.Namespace, task.Name = "ns", "t"
		c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&kubeapi.Task{}).WithObjects(task).Build()
		if err := c.Get(context.Background(), ctrlclient.ObjectKeyFromObject(task), task); err != nil {
			t.Fatal(err)
		}
		cl := &kube.Claimer{Client: c, Node: "n"}
		var out kube.ClaimOutcome
		var err error
		if tc.takeOver {
			out, err = cl.TakeOver(context.Background(), task, nil, v1alpha1.Contract{})
		} else {
			out, err = cl.Claim(context.Background(), task, v1alpha1.Contract{})
		}
		var stored kubeapi.Task
		if gerr := c.Get(context.Background(), ctrlclient.ObjectKeyFromObject(task), &stored); gerr != nil {
			t.Fatal(gerr)
		}
		if tc.want == "" {
			var te *v1alpha1.TransitionError
			if !errors.As(err, &te) || te.From != tc.from || stored.Status.Claim.Node != tc.holder {
				t.Errorf("from %q: want a refusal and nothing written, got %v, %v, claim %+v", tc.from, out, err, stored.Status.Claim)
			}
			continue
		}
		if err != nil || out != kube.Claimed || stored.Status.Phase != tc.want || stored.Status.Claim.Node != "n" {
			t.Errorf("from %q: %v, %v; stored phase %q, claim %+v", tc.from, out, err, stored.Status.Phase, stored.Status.Claim)
		}
	}
}
