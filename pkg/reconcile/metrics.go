package reconcile

import (
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// Metrics is what the controller reports to; nil-safe use through noMetrics.
type Metrics interface {
	DecisionObserver
	// ObserveBatch records a finished batch.
	ObserveBatch(class string, d time.Duration, peakBytes int64)
	// ObserveStatusWrite records the latency of one status write.
	ObserveStatusWrite(d time.Duration, err error)
	// ObservePhaseRefused counts a phase transition the table forbids.
	ObservePhaseRefused(from, to v1alpha1.Phase)
	// SetPhases replaces the count of tasks per phase.
	SetPhases(counts map[v1alpha1.Phase]int)
	// SetReady reports that the spool was listed once.
	SetReady(ready bool)
}

type noMetrics struct{}

func (noMetrics) ObserveDecision(governor.Decision)         {}
func (noMetrics) ObserveBatch(string, time.Duration, int64) {}
func (noMetrics) ObserveStatusWrite(time.Duration, error)   {}
func (noMetrics) ObservePhaseRefused(_, _ v1alpha1.Phase)   {}
func (noMetrics) SetPhases(map[v1alpha1.Phase]int)          {}
func (noMetrics) SetReady(bool)                             {}
