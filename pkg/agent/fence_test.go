package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/kube"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// TestLeaseTimesAreChecked: a renew deadline at or past the lease
// duration (a node could be taken over before it stopped its batches), or
// at or under the renew period, is refused, as is a halt fraction outside
// (0, 1].
func TestLeaseTimesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		period, deadline, lease time.Duration
		halt                    float64
		want                    string // "": accepted
	}{
		{2 * time.Second, 10 * time.Second, 15 * time.Second, 0.55, ""},
		{2 * time.Second, 15 * time.Second, 15 * time.Second, 0.55, "shorter than the lease duration"},
		{2 * time.Second, 2 * time.Second, 15 * time.Second, 0.55, "longer than the renew period"},
		{2 * time.Second, 10 * time.Second, 15 * time.Second, 1.5, "fraction"},
		{2 * time.Second, 10 * time.Second, 15 * time.Second, 1, ""},
	} {
		err := checkLeaseTimes(Config{RenewPeriod: tc.period, RenewDeadline: tc.deadline, LeaseDuration: tc.lease, TakeoverHalt: tc.halt})
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc, err, tc.want)
		}
	}
}

// TestTakeoversHaltWhenMostLeasesExpireAtOnce: with the default fraction,
// one dead node of two (this one alive) is taken over, two of three are
// not; a node gone for good (its Lease expired, holding no task) does not
// count; once the Leases renew again, takeovers resume.
func TestTakeoversHaltWhenMostLeasesExpireAtOnce(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := &Source{cfg: Config{Node: "me", TakeoverHalt: 0.55}, live: &kube.Liveness{Now: func() time.Time { return now }}}
	renewals := map[string]int{}
	leases := func(names ...string) []coordinationv1.Lease {
		var out []coordinationv1.Lease
		for _, n := range names {
			rt := metav1.NewMicroTime(time.Unix(int64(renewals[n]), 0))
			out = append(out, coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: "lardon3d", Name: kube.LeaseName(n)},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n), RenewTime: &rt, LeaseDurationSeconds: ptr.To(int32(10))},
			})
		}
		return out
	}
	holding := func(nodes ...string) []kubeapi.Task {
		var out []kubeapi.Task
		for i, n := range nodes {
			var t kubeapi.Task
			t.Name = fmt.Sprint(i)
			t.Status.Phase = v1alpha1.PhaseRunning
			t.Status.Claim = &kubeapi.Claim{Node: n, Seq: 1}
			out = append(out, t)
		}
		return out
	}
	all := []string{"me", "a", "b", "gone"}
	s.haltTakeovers(nil, leases(all...)) // every Lease seen once
	now = now.Add(10 * time.Second)
	renewals["me"]++
	// "a" dead and holding, "b" alive: 1 of 3 counted ("gone" holds nothing).
	renewals["b"]++
	if s.haltTakeovers(holding("a"), leases(all...)) {
		t.Error("halted with one dead node of three")
	}
	// "a" and "b" dead, both holding: 2 of 3.
	now = now.Add(10 * time.Second)
	renewals["me"]++
	if !s.haltTakeovers(holding("a", "b"), leases(all...)) {
		t.Error("not halted with two dead nodes of three")
	}
	// Two nodes, the other dead: 1 of 2 is not most.
	if s.haltTakeovers(holding("a"), leases("me", "a")) {
		t.Error("halted with one dead node of two")
	}
	// Every Lease renews: takeovers resume.
	renewals["a"]++
	renewals["b"]++
	if s.haltTakeovers(holding("a", "b"), leases(all...)) {
		t.Error("still halted once the Leases renewed")
	}
}
