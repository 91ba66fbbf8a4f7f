package podrunner

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// NodeView is what the kubelet counts when it admits a Pod on a node: the
// node's allocatable, and what the Pods on it that no node agent made
// request.
type NodeView struct {
	// Known is false until the node and its Pods were read once.
	Known bool
	// AllocatableMemory is the node's status.allocatable memory, in bytes.
	AllocatableMemory int64
	// AllocatableCPUs is its allocatable cpu, in whole CPUs (rounded down).
	AllocatableCPUs int
	// ForeignMemoryRequests is the sum of the memory requests of the Pods
	// bound to the node, not ended, that no node agent made.
	ForeignMemoryRequests int64
}

// KubeletBound bounds a snapshot of the machine by what the kubelet counts,
// so that a batch the governor admits is one the kubelet admits too. Every
// batch Pod requests its contract times (1+tolerance) and the governor
// reserves the contract, so the kubelet's memory is counted in contract
// units, divided by (1+tolerance):
//
//	MemTotal     = min(MemTotal, allocatable/(1+tolerance))
//	MemAvailable = min(MemAvailable, (allocatable − foreign requests)/(1+tolerance))
//
// The governor subtracts its own reservations (the batches' Pods) from
// both. MemAvailable, the kernel's, stays where it is lower: Pods that use
// more than they request. The agent's own cgroup bounds nothing (its
// limits are its own, not its batches'), and CPUs is the node's
// allocatable cpu. An unknown view leaves nothing available: MemAvailable
// is then 1 byte, as when other Pods request it all (0 would read as
// "unknown" to the governor, which then counts the capacity).
func KubeletBound(s governor.Snapshot, v NodeView, tolerance float64) governor.Snapshot {
	s.CgroupMemoryLimit, s.CgroupMemoryUsage, s.CPUQuota = 0, 0, 0
	if !v.Known {
		s.MemAvailable = 1
		return s
	}
	unit := 1 + max(tolerance, 0)
	s.MemTotal = min(s.MemTotal, int64(float64(v.AllocatableMemory)/unit))
	s.MemAvailable = max(min(s.MemAvailable, int64(float64(max(v.AllocatableMemory-v.ForeignMemoryRequests, 0))/unit)), 1)
	if v.AllocatableCPUs > 0 {
		s.CPUs = v.AllocatableCPUs
	}
	return s
}

// NodeWatch keeps a NodeView of one node fresh: Refresh reads the Node
// and the Pods bound to it, Run refreshes every period, View hands the
// last reading without waiting.
type NodeWatch struct {
	// Client reaches the API server.
	Client kubernetes.Interface
	// Node is the node watched.
	Node string

	mu   sync.Mutex
	view NodeView
}

// View is the last successful reading.
func (w *NodeWatch) View() NodeView {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.view
}

// Run refreshes the view every period until ctx ends.
func (w *NodeWatch) Run(ctx context.Context, period time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		_, _ = w.Refresh(ctx)
	}
}

// Refresh reads the view from the API server and keeps it (a failed read
// keeps the previous one).
func (w *NodeWatch) Refresh(ctx context.Context) (NodeView, error) {
	v, err := w.read(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.view = v
	}
	return w.view, err
}

// read reads the node's view from the API server.
func (w *NodeWatch) read(ctx context.Context) (NodeView, error) {
	node, err := w.Client.CoreV1().Nodes().Get(ctx, w.Node, metav1.GetOptions{})
	if err != nil {
		return NodeView{}, fmt.Errorf("reading Node %s: %w", w.Node, err)
	}
	pods, err := w.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", w.Node).String(),
	})
	if err != nil {
		return NodeView{}, fmt.Errorf("listing the Pods of %s: %w", w.Node, err)
	}
	v := NodeView{Known: true}
	if q, ok := node.Status.Allocatable[corev1.ResourceMemory]; ok {
		v.AllocatableMemory = q.Value()
	}
	if q, ok := node.Status.Allocatable[corev1.ResourceCPU]; ok {
		v.AllocatableCPUs = int(q.MilliValue() / 1000)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[ManagedByLabel] == ManagedBy || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		v.ForeignMemoryRequests += podMemoryRequest(p)
	}
	return v, nil
}

// podMemoryRequest is what the kubelet counts of a Pod's memory: the sum
// of its containers' requests, or its largest init container's if more,
// plus its overhead.
func podMemoryRequest(p *corev1.Pod) int64 {
	var sum, initMax int64
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
			sum += q.Value()
		}
	}
	for _, c := range p.Spec.InitContainers {
		if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
			if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				sum += q.Value() // a sidecar runs beside the containers
				continue
			}
			initMax = max(initMax, q.Value())
		}
	}
	if q, ok := p.Spec.Overhead[corev1.ResourceMemory]; ok {
		sum += q.Value()
	}
	return max(sum, initMax)
}
