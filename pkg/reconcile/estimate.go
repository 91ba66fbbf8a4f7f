package reconcile

import (
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// EstimateFor converts a task's resources into the governor's estimate for a
// task of itemsTotal items.
func EstimateFor(spec *v1alpha1.TaskSpec, itemsTotal int64) governor.Estimate {
	r := spec.Resources
	e := governor.Estimate{
		Class:            string(spec.Class),
		FixedMemory:      bytesOf(r.Fixed.Memory),
		PerItemMemory:    bytesOf(r.PerItem.Memory),
		PerThreadMemory:  bytesOf(r.PerThread.Memory),
		FixedGPUMemory:   bytesOf(r.Fixed.GPUMemory),
		PerItemGPUMemory: bytesOf(r.PerItem.GPUMemory),
		BatchMin:         r.Batch.Min,
		BatchMax:         r.Batch.Max,
		Threads:          int(r.Threads),
		MinThreads:       int(r.MinThreads),
		IOSlots:          int(r.IOSlots),
		GPUSlots:         int(r.GPUSlots),
		ScratchBytes:     bytesOf(r.Scratch),
	}
	if e.Class == "" {
		e.Class = string(v1alpha1.ClassCustom)
	}
	if e.BatchMin < 1 {
		e.BatchMin = 1
	}
	e = e.CappedAt(itemsTotal)
	if e.Threads < 1 {
		e.Threads = 1
	}
	if e.MinThreads < 1 || e.MinThreads > e.Threads {
		e.MinThreads = 1
	}
	return e
}

func bytesOf(q *resource.Quantity) int64 {
	if q == nil {
		return 0
	}
	return q.Value()
}

// ContractStatus converts a governor contract into its status form.
func ContractStatus(c governor.Contract) *v1alpha1.Contract {
	out := &v1alpha1.Contract{
		Batch:          c.Batch,
		BatchRequested: c.BatchRequested,
		Threads:        int32(c.Threads),
		Memory:         *resource.NewQuantity(c.MemoryBytes, resource.BinarySI),
		IOSlots:        int32(c.IOSlots),
		GPUSlots:       int32(c.GPUSlots),
		ScratchDir:     c.ScratchDir,
		Generation:     c.Generation,
	}
	out.GrantedAt.Time = c.GrantedAt
	if c.GPUMemoryBytes > 0 {
		out.GPUMemory = resource.NewQuantity(c.GPUMemoryBytes, resource.BinarySI)
	}
	if c.ScratchBytes > 0 {
		out.Scratch = resource.NewQuantity(c.ScratchBytes, resource.BinarySI)
	}
	return out
}
