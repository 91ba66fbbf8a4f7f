package reconcile

import "sync"

// inbox is an unbounded, never-blocking hand-off from other goroutines (the
// queue's workers, the batch adapter) to the owner goroutine.
type inbox struct {
	wake chan struct{}

	mu struct {
		sync.Mutex
		items []any
	}
}

func newInbox() *inbox { return &inbox{wake: make(chan struct{}, 1)} }

// push appends x and wakes the owner; it never blocks.
func (b *inbox) push(x any) {
	b.mu.Lock()
	b.mu.items = append(b.mu.items, x)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// drain takes everything pushed so far, in order.
func (b *inbox) drain() []any {
	b.mu.Lock()
	defer b.mu.Unlock()
	items := b.mu.items
	b.mu.items = nil
	return items
}
