package main

import (
	"fmt"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/share"
)

// fairConfig is the --config file's part that decides between people:
// priority classes, fair share between accounts, quotas.
type fairConfig struct {
	// PriorityClasses name priorities a manifest's spec.priority may give
	// by name (as Kubernetes' PriorityClass), e.g. {high: 1000, low: -100}.
	PriorityClasses map[string]int64 `json:"priorityClasses,omitempty"`
	// DefaultPriority is a task's without spec.priority: an integer or a
	// class name (default 0).
	DefaultPriority *intstr.IntOrString `json:"defaultPriority,omitempty"`
	// PriorityMaxAge is how long a pending task waits before it competes
	// with the highest priority (aging; default 30m).
	PriorityMaxAge *metav1.Duration `json:"priorityMaxAge,omitempty"`
	// FairShareHalfLife is the half-life of each account's usage
	// (reserved memory × time; default 1h).
	FairShareHalfLife *metav1.Duration `json:"fairShareHalfLife,omitempty"`
	// Shares weighs the accounts (default 1 each).
	Shares map[string]float64 `json:"shares,omitempty"`
	// Accounts charge a spool's tasks to an account other than its
	// directory's owner: spool directory → account.
	Accounts map[string]string `json:"accounts,omitempty"`
	// Quotas cap what an account holds at once.
	Quotas map[string]quotaConfig `json:"quotas,omitempty"`
}

// quotaConfig is one account's caps; each unset caps nothing.
type quotaConfig struct {
	// Memory caps the memory its reservations hold.
	Memory *resource.Quantity `json:"memory,omitempty"`
	// GPUMemory caps the GPU memory they hold.
	GPUMemory *resource.Quantity `json:"gpuMemory,omitempty"`
	// GPUSlots caps the GPU slots they hold.
	GPUSlots *int `json:"gpuSlots,omitempty"`
	// RunningTasks caps its tasks running at once.
	RunningTasks *int `json:"runningTasks,omitempty"`
}

// apply checks fc and sets what it says in the queue's configuration; it
// returns the default priority resolved.
func (fc fairConfig) apply(q *queue.Config) (int64, error) {
	for name, v := range fc.PriorityClasses {
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			return 0, fmt.Errorf("priorityClasses: %q must be a lower case name (a-z, 0-9, '-')", name)
		}
		if v < -v1alpha1.MaxPriority || v > v1alpha1.MaxPriority {
			return 0, fmt.Errorf("priorityClasses.%s: %d must be from -%d to %d", name, v, v1alpha1.MaxPriority, v1alpha1.MaxPriority)
		}
	}
	var def int64
	if p := fc.DefaultPriority; p != nil {
		if p.Type == intstr.Int {
			def = int64(p.IntVal)
		} else if v, ok := fc.PriorityClasses[p.StrVal]; ok {
			def = v
		} else {
			return 0, fmt.Errorf("defaultPriority: %q is not among priorityClasses", p.StrVal)
		}
	}
	if d := fc.PriorityMaxAge; d != nil {
		if d.Duration <= 0 {
			return 0, fmt.Errorf("priorityMaxAge: %s must be > 0", d.Duration)
		}
		q.PriorityMaxAge = d.Duration
	}
	if d := fc.FairShareHalfLife; d != nil {
		if d.Duration <= 0 {
			return 0, fmt.Errorf("fairShareHalfLife: %s must be > 0", d.Duration)
		}
		q.Fair.HalfLife = d.Duration
	}
	for name, s := range fc.Shares {
		if !(s > 0) {
			return 0, fmt.Errorf("shares.%s: %g must be > 0", name, s)
		}
	}
	q.Fair.Shares = fc.Shares
	if len(fc.Quotas) > 0 {
		q.Fair.Quotas = make(map[string]share.Quota, len(fc.Quotas))
	}
	for name, qc := range fc.Quotas {
		var sq share.Quota
		if qc.Memory != nil {
			sq.MemoryBytes = qc.Memory.Value()
		}
		if qc.GPUMemory != nil {
			sq.GPUMemoryBytes = qc.GPUMemory.Value()
		}
		for what, v := range map[string]*int{"gpuSlots": qc.GPUSlots, "runningTasks": qc.RunningTasks} {
			if v != nil && *v < 1 {
				return 0, fmt.Errorf("quotas.%s.%s: %d must be >= 1", name, what, *v)
			}
		}
		if qc.GPUSlots != nil {
			sq.GPUSlots = *qc.GPUSlots
		}
		if qc.RunningTasks != nil {
			sq.Running = *qc.RunningTasks
		}
		if sq.MemoryBytes < 0 || sq.GPUMemoryBytes < 0 {
			return 0, fmt.Errorf("quotas.%s: a memory cap must be >= 0", name)
		}
		q.Fair.Quotas[name] = sq
	}
	return def, nil
}

// accountOf is the account configured for the spool dir ("" for its
// owner's), matched by its absolute, cleaned path.
func (fc fairConfig) accountOf(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	keys := make([]string, 0, len(fc.Accounts))
	for k := range fc.Accounts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if ka, err := filepath.Abs(k); err == nil && ka == abs {
			return fc.Accounts[k]
		}
	}
	return ""
}
