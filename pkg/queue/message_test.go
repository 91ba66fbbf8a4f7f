package queue

import (
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// TestMessagesCountInTheSingular: "1 batch", "1 thread", never "1 batches".
func TestMessagesCountInTheSingular(t *testing.T) {
	for got, want := range map[string]string{
		doneMessage(1, 1): "1 item done in 1 batch",
		doneMessage(4, 2): "all 4 items done in 2 batches",
		ContractMessage(governor.Contract{Batch: 1, BatchRequested: 1, Threads: 1, MemoryBytes: 1 << 20}): "batch 1 of 1 asked, 1 thread, 1.0MiB reserved",
		ContractMessage(governor.Contract{Batch: 2, BatchRequested: 4, Threads: 3, MemoryBytes: 1 << 20}): "batch 2 of 4 asked, 3 threads, 1.0MiB reserved",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
