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

// pop takes the oldest item; false when there is none. Popping one at a
// time keeps the order even when handling an item pops the next ones.
func (b *inbox) pop() (any, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mu.items) == 0 {
		return nil, false
	}
	x := b.mu.items[0]
	b.mu.items[0] = nil
	b.mu.items = b.mu.items[1:]
	if len(b.mu.items) == 0 {
		b.mu.items = nil // let the backing array go
	}
	return x, true
}
