package spool

import (
	"sync"
	"sync/atomic"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// The emitter's self-check (checkBlock) reads a block back the way every
// client reads a manifest, which costs a YAML parse per status write. What
// it can catch is of two kinds:
//   - the block's structure (which keys, how nested, which present, how
//     many list items), a function of the block's shape: the block with
//     every scalar replaced by its kind (appendStatusBlockShape);
//   - the text of each scalar, which appendScalar, strconv and the RFC 3339
//     format give: proven for every value of each kind by FuzzEmitScalars
//     (any strings, numbers and times in every string, number and time
//     field) and TestEmitStatusRoundTrip (random statuses).
// So the check runs once per shape: a block whose shape passed it before,
// in this process, is taken without the parse. A new shape (another field
// present, one more condition, a string that needs quoting) is checked.

// maxCheckedShapes bounds the shapes remembered; past it they are
// forgotten and checked again.
const maxCheckedShapes = 4096

// checkedShapes are the shapes whose block passed checkBlock.
var checkedShapes struct {
	sync.Mutex
	m map[string]struct{}
}

// fullChecks counts the blocks checkBlock parsed (for the tests).
var fullChecks atomic.Int64

// emitChecked emits status as a block under pad with line ending nl, and
// checks it (checkBlock) unless a block of the same shape passed before.
func emitChecked(pad, nl string, status *v1alpha1.TaskStatus) ([]byte, error) {
	block, shape := appendStatusBlockShape(make([]byte, 0, 512), make([]byte, 0, 256), pad, nl, status)
	checkedShapes.Lock()
	_, ok := checkedShapes.m[string(shape)]
	checkedShapes.Unlock()
	if ok {
		return block, nil
	}
	fullChecks.Add(1)
	if err := checkBlock(block, status); err != nil {
		return nil, err
	}
	checkedShapes.Lock()
	if checkedShapes.m == nil || len(checkedShapes.m) >= maxCheckedShapes {
		checkedShapes.m = make(map[string]struct{})
	}
	checkedShapes.m[string(shape)] = struct{}{}
	checkedShapes.Unlock()
	return block, nil
}
