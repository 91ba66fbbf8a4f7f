package main

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lardon3d/lardon3d-controller/pkg/queue"
)

// The fair-share settings reach the queue's configuration; each wrong
// value is refused naming its key.
func TestFairConfigAppliesAndRefusesWrongValues(t *testing.T) {
	mem := resource.MustParse("3Gi")
	two := 2
	low := intstr.FromString("low")
	fc := fairConfig{
		PriorityClasses:   map[string]int64{"high": 1000, "low": -100},
		DefaultPriority:   &low,
		PriorityMaxAge:    &metav1.Duration{Duration: 10 * time.Minute},
		FairShareHalfLife: &metav1.Duration{Duration: 2 * time.Hour},
		Shares:            map[string]float64{"alice": 2},
		Accounts:          map[string]string{"/srv/lab/spool/": "lab"},
		Quotas:            map[string]quotaConfig{"bob": {Memory: &mem, RunningTasks: &two}},
	}
	var q queue.Config
	def, err := fc.apply(&q)
	if err != nil || def != -100 || q.PriorityMaxAge != 10*time.Minute || q.Fair.HalfLife != 2*time.Hour ||
		q.Fair.Shares["alice"] != 2 || q.Fair.Quotas["bob"].MemoryBytes != 3<<30 || q.Fair.Quotas["bob"].Running != 2 {
		t.Fatalf("apply: %v, default %d, %+v", err, def, q)
	}
	if got := fc.accountOf("/srv/lab/spool"); got != "lab" {
		t.Errorf("accountOf: %q, want lab (the path cleaned)", got)
	}
	if got := fc.accountOf("/srv/other"); got != "" {
		t.Errorf("accountOf another spool: %q", got)
	}
	zero := 0
	nope := intstr.FromString("urgent")
	for want, bad := range map[string]fairConfig{
		"priorityClasses":          {PriorityClasses: map[string]int64{"Hi": 1}},
		"priorityClasses.x":        {PriorityClasses: map[string]int64{"x": 2_000_000_000}},
		"defaultPriority":          {DefaultPriority: &nope},
		"priorityMaxAge":           {PriorityMaxAge: &metav1.Duration{}},
		"fairShareHalfLife":        {FairShareHalfLife: &metav1.Duration{Duration: -time.Hour}},
		"shares.bob":               {Shares: map[string]float64{"bob": 0}},
		"quotas.bob.runningTasks:": {Quotas: map[string]quotaConfig{"bob": {RunningTasks: &zero}}},
	} {
		if _, err := bad.apply(&queue.Config{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming it", want, err)
		}
	}
}
