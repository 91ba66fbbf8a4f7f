package podrunner

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// units is b in contract units, tolerance 10 %.
func units(b int64) int64 { return int64(float64(b) / 1.1) }

func TestKubeletBound(t *testing.T) {
	const gi = int64(1) << 30
	machine := governor.Snapshot{MemTotal: 64 * gi, MemAvailable: 60 * gi, CgroupMemoryLimit: 256 << 20, CgroupMemoryUsage: 100 << 20, CPUs: 1, CPUQuota: 0.5}
	for _, tc := range []struct {
		name               string
		view               NodeView
		wantTotal, wantAva int64
		wantCPUs           int
	}{
		{"unknown view: nothing available", NodeView{}, 64 * gi, 1, 1},
		{"allocatable bounds both, in contract units", NodeView{Known: true, AllocatableMemory: 44 * gi, AllocatableCPUs: 16},
			units(44 * gi), units(44 * gi), 16},
		{"foreign requests lower what is available, not the capacity", NodeView{Known: true, AllocatableMemory: 44 * gi, AllocatableCPUs: 16, ForeignMemoryRequests: 33 * gi},
			units(44 * gi), units(11 * gi), 16},
		{"the kernel's available stays where lower", NodeView{Known: true, AllocatableMemory: 120 * gi, AllocatableCPUs: 16},
			64 * gi, 60 * gi, 16},
		{"requests past allocatable leave nothing", NodeView{Known: true, AllocatableMemory: 8 * gi, ForeignMemoryRequests: 9 * gi},
			units(8 * gi), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := KubeletBound(machine, tc.view, 0.10)
			if got.MemTotal != tc.wantTotal || got.MemAvailable != tc.wantAva || got.CPUs != tc.wantCPUs {
				t.Errorf("total %d available %d cpus %d, want %d %d %d", got.MemTotal, got.MemAvailable, got.CPUs, tc.wantTotal, tc.wantAva, tc.wantCPUs)
			}
			if got.CgroupMemoryLimit != 0 || got.CgroupMemoryUsage != 0 || got.CPUQuota != 0 {
				t.Errorf("the agent's own cgroup still bounds the batches: %+v", got)
			}
		})
	}
}

func TestPodMemoryRequestCountsAsTheKubeletDoes(t *testing.T) {
	mem := func(s string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(s)}}
	}
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Resources: mem("1Gi")}, {Resources: mem("512Mi")}, {}},
		InitContainers: []corev1.Container{{Resources: mem("4Gi")}, {Resources: mem("256Mi"), RestartPolicy: &always}},
		Overhead:       corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
	}}
	// Containers 1.5Gi + sidecar 256Mi + overhead 128Mi = 1.875Gi, below
	// the 4Gi init container: the kubelet counts 4Gi.
	if got := podMemoryRequest(p); got != 4<<30 {
		t.Errorf("request %d, want 4Gi", got)
	}
	p.Spec.InitContainers = p.Spec.InitContainers[1:]
	if got, want := podMemoryRequest(p), int64(1536+256+128)<<20; got != want {
		t.Errorf("request %d, want %d", got, want)
	}
}

// TestKubeletBoundHoldsTheGovernor: through the governor itself, a batch
// that the kubelet would refuse is not admitted: with the view unknown,
// with other Pods' requests leaving too little, and it is with room left.
func TestKubeletBoundHoldsTheGovernor(t *testing.T) {
	const gi = int64(1) << 30
	machine := governor.Snapshot{MemTotal: 64 * gi, MemAvailable: 60 * gi, CPUs: 16}
	demand := governor.Estimate{PerItemMemory: gi, BatchMin: 1, BatchMax: 8, Threads: 1, MinThreads: 1}
	for _, tc := range []struct {
		name     string
		view     NodeView
		admit    bool
		maxItems int64
	}{
		{"unknown view", NodeView{}, false, 0},
		{"others request all but 2 GiB", NodeView{Known: true, AllocatableMemory: 60 * gi, AllocatableCPUs: 16, ForeignMemoryRequests: 58 * gi}, true, 1},
		{"others request it all", NodeView{Known: true, AllocatableMemory: 60 * gi, AllocatableCPUs: 16, ForeignMemoryRequests: 60 * gi}, false, 0},
		{"room for every item", NodeView{Known: true, AllocatableMemory: 60 * gi, AllocatableCPUs: 16}, true, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := governor.New(governor.Config{MemoryReserved: -1, LoadThreshold: -1, IOPressureThreshold: -1})
			g.Update(KubeletBound(machine, tc.view, 0.10))
			d := g.Decide(demand)
			admitted := d.Verdict == governor.Admit || d.Verdict == governor.ReduceBatch
			if admitted != tc.admit {
				t.Fatalf("verdict %v (%s, free %d), want admitted %v", d.Verdict, d.Reason, d.Free, tc.admit)
			}
			if admitted {
				ceiling := int64(float64(d.Batch*demand.PerItemMemory) * 1.10)
				if free := tc.view.AllocatableMemory - tc.view.ForeignMemoryRequests; ceiling > free {
					t.Errorf("the batch's Pod requests %d, the kubelet has %d", ceiling, free)
				}
				if d.Batch > tc.maxItems {
					t.Errorf("batch %d, want at most %d", d.Batch, tc.maxItems)
				}
			}
		})
	}
}
