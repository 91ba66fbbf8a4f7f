package reconcile

import (
	"sort"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// entry is one manifest the controller knows.
type entry struct {
	path   string
	name   string
	task   *v1alpha1.Task // last parsed version of the file
	status v1alpha1.TaskStatus
	// appliedHash is the spec hash of the generation the queue runs; it can
	// differ from the file's when an edit waits for the task to stop.
	appliedHash string
	fileHash    string
	// owner runs the task's batches (nil: the controller's user): the
	// spool's owner, for a controller running as root (spoolUser).
	owner       *runner.User
	inQueue     bool
	duplicateOf string
	// parseErr is the validation error of the file's last version (nil
	// when valid).
	parseErr error
	// resolving is the request for its items on its way to the resolver
	// (nil: none); its answer carries out what it was asked for.
	resolving *itemsRequest
	// itemsDeferred: its glob matched nothing while a dependency was not
	// Done; resolved again when one ends Done (deferItems).
	itemsDeferred bool
	// restart says a restart was asked for the edit waiting in the file
	// (a new spec.restartToken): the next generation cancels the one in
	// flight rather than wait for it (restartGeneration).
	restart bool

	// The status's writes (statuswriter.go). marked says the status
	// changed since the last hand-off to the writer, urgent that a phase
	// changed, commit that committed progress awaits its write (no
	// grace). version is the latest version handed, firstVersion the
	// entry's first, written the latest the writer reported written.
	marked, urgent, commit bool
	version, firstVersion  uint64
	written                uint64
	everWritten            bool
	// queuedUntil, for a new manifest never written and only queued, is
	// when its first write is due at the latest (Config.QueuedWriteDelay);
	// requeued says it was set since the last hand-off.
	queuedUntil time.Time
	requeued    bool
	// waitNumbersAt is when a wait whose reason stayed, with new numbers
	// in its message, was last handed for a write.
	waitNumbersAt time.Time
	// writeErr is the last write's error (nil once one lands).
	writeErr error
}

// editPending reports whether the file holds a spec the task has not
// taken: a changed spec, or an invalid one not yet rejected.
func (e *entry) editPending() bool {
	return e.fileHash != e.appliedHash || (e.parseErr != nil && e.status.Phase != v1alpha1.PhaseRejected)
}

// unwritten reports whether the entry holds a status the writer has not
// written yet.
func (e *entry) unwritten() bool { return e.marked || e.version > e.written }

// taskTable is the manifests a controller knows: by path, the task's
// name and which file owns each name (a second file of the same name is
// a duplicate, rejected), and the files that are not tasks. Only the
// owner goroutine touches it.
type taskTable struct {
	entries map[string]*entry // by path
	byName  map[string]string // name → path of the file that owns it
	invalid map[string]error  // path → why it is not a task (syntax, refused)
	// dependents indexes the entries by each name their task's dependsOn
	// holds (dependentsOf): a task's end looks up who waits for it
	// without reading every entry. put, drop and setTask keep it.
	dependents map[string]map[*entry]struct{}
	// stale says an entry came or went, or a phase changed, since the
	// phase gauge was last counted.
	stale bool
}

func newTaskTable() taskTable {
	return taskTable{entries: make(map[string]*entry), byName: make(map[string]string), invalid: make(map[string]error),
		dependents: make(map[string]map[*entry]struct{})}
}

// put makes e the entry of the manifest at path, and drop forgets the
// entry at path: entries changes only through them, an entry's task only
// through setTask, and a phase only in setPhase, so that countPhases
// knows when to count again and dependentsOf stays true.
func (t *taskTable) put(path string, e *entry) {
	if old := t.entries[path]; old != nil {
		t.unindex(old)
	}
	t.entries[path] = e
	t.index(e)
	t.stale = true
}

// drop: see put.
func (t *taskTable) drop(path string) {
	if old := t.entries[path]; old != nil {
		t.unindex(old)
	}
	delete(t.entries, path)
	t.stale = true
}

// setTask makes task the last parsed version of e's manifest.
func (t *taskTable) setTask(e *entry, task *v1alpha1.Task) {
	current := t.current(e)
	if current {
		t.unindex(e)
	}
	e.task = task
	if current {
		t.index(e)
	}
}

// index adds e under each name its task depends on; unindex removes it.
func (t *taskTable) index(e *entry) {
	if e.task == nil {
		return
	}
	for _, n := range e.task.Spec.DependsOn {
		m := t.dependents[n]
		if m == nil {
			m = make(map[*entry]struct{})
			t.dependents[n] = m
		}
		m[e] = struct{}{}
	}
}

// unindex: see index.
func (t *taskTable) unindex(e *entry) {
	if e.task == nil {
		return
	}
	for _, n := range e.task.Spec.DependsOn {
		if m := t.dependents[n]; m != nil {
			delete(m, e)
			if len(m) == 0 {
				delete(t.dependents, n)
			}
		}
	}
}

// current reports whether e is still the entry of its path.
func (t *taskTable) current(e *entry) bool { return t.entries[e.path] == e }

// named is the entry that owns name, nil when none.
func (t *taskTable) named(name string) *entry {
	path, ok := t.byName[name]
	if !ok {
		return nil
	}
	return t.entries[path]
}

// dependentsOf lists the tasks naming name in dependsOn, in name order
// (then path: a duplicate has its owner's name).
func (t *taskTable) dependentsOf(name string) []*entry {
	var out []*entry
	for d := range t.dependents[name] {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].name < out[j].name || out[i].name == out[j].name && out[i].path < out[j].path
	})
	return out
}

// duplicateWaiting is a duplicate of the manifest at path that uses
// name, nil when none.
func (t *taskTable) duplicateWaiting(path, name string) *entry {
	for _, d := range t.entries {
		if d.duplicateOf == path && d.name == name {
			return d
		}
	}
	return nil
}

// moved records that the manifest at from is now at to, for the entries
// that name it as the owner of their name.
func (t *taskTable) moved(from, to string) {
	for _, d := range t.entries {
		if d.duplicateOf == from {
			d.duplicateOf = to
		}
	}
}
