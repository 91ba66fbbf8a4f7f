package reconcile

import (
	"maps"
	"path/filepath"
	"slices"
	"sync"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// The controller's rows are what a served listing reads.
var _ listing.Rows = (*Controller)(nil)

// listIndex is the list index: one row per manifest whose current version
// the controller knows (what spool events reported, then what status
// writes left), for the listings the running controller serves. Only the
// owner goroutine writes it; listings read it on their own goroutines
// (IndexedRow).
type listIndex struct {
	// mu guards live. Its rows are never changed once stored (a new row
	// replaces one).
	mu   sync.RWMutex
	live map[string]*listing.VersionedRow // base name → row
	// deps holds, by base name, the spec.dependsOn of the rows that have
	// one (the web view's task graph); never changed once stored.
	deps map[string][]string
}

// fileSeen notes the version a spool event reports: its task (valid) or
// nothing (anything else a listing must read for itself).
func (x *listIndex) fileSeen(ev spool.Event) {
	if ev.OldPath != "" {
		x.drop(ev.OldPath)
	}
	switch ev.Type {
	case spool.Added, spool.Modified, spool.Renamed:
		if ev.Task != nil && ev.Err == nil {
			id := ev.Identity
			x.set(ev.Path, ev.Task, listing.FileVersion{Inode: id.Inode, Size: id.Size, ModTime: id.ModTime.UnixNano()})
			return
		}
	}
	x.drop(ev.Path)
}

// wrote notes that path now holds task's spec (as last read) with status:
// the version is the one stat finds right after the write. (A writer that
// replaced the file in between would have its version listed with this
// status until the spool's event for it.)
func (x *listIndex) wrote(path string, task *v1alpha1.Task, status *v1alpha1.TaskStatus) {
	v, err := listing.VersionOf(path)
	if task == nil || err != nil {
		x.drop(path)
		return
	}
	t := *task
	t.Status = *status
	x.set(path, &t, v)
}

// set makes t, at version v, the row of the manifest at path.
func (x *listIndex) set(path string, t *v1alpha1.Task, v listing.FileVersion) {
	r := &listing.VersionedRow{Version: v, Row: listing.RowOf(t, ProfileOf(&t.Spec))}
	// The row is read on other goroutines: its labels are its own copy,
	// not the task's map.
	r.Row.Labels = maps.Clone(r.Row.Labels)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.live == nil {
		x.live = make(map[string]*listing.VersionedRow)
	}
	base := filepath.Base(path)
	x.live[base] = r
	if len(t.Spec.DependsOn) == 0 {
		delete(x.deps, base)
		return
	}
	if x.deps == nil {
		x.deps = make(map[string][]string)
	}
	x.deps[base] = slices.Clone(t.Spec.DependsOn)
}

// drop forgets the row of the manifest at path.
func (x *listIndex) drop(path string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.live, filepath.Base(path))
	delete(x.deps, filepath.Base(path))
}

// IndexedRow is the list index's row of the manifest called base, as the
// controller knows it now (what it last read or wrote of the file), for a
// listing the running controller serves (listing.Rows). The caller must
// not change it. It is safe to call from any goroutine.
func (c *Controller) IndexedRow(base string) (*listing.VersionedRow, bool) {
	x := &c.index
	x.mu.RLock()
	defer x.mu.RUnlock()
	r, ok := x.live[base]
	return r, ok
}
