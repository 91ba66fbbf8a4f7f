package reconcile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// resolveItems resolves a task's items, relative to the spool. For a
// task run as another user (spoolUser), every item that is a path must be
// one that user may read: the controller resolves them with its own
// rights, and must not hand the user's batch what only root reaches
// (neither a name nor a content).
func resolveItems(spoolDir string, owner *runner.User, spec v1alpha1.TaskSpec) (v1alpha1.ItemList, error) {
	if owner == nil {
		return v1alpha1.ResolveItems(spec, spoolDir)
	}
	// Globbed as the user too: a pattern lists only what the user may.
	var items v1alpha1.ItemList
	err := runner.AsUser(owner, func() error {
		var err error
		if items, err = v1alpha1.ResolveItems(spec, spoolDir); err != nil {
			return err
		}
		denied := 0
		for _, it := range items.Paths() {
			if filepath.IsAbs(it) && owner.MayRead(it) != nil {
				denied++
			}
		}
		if denied > 0 {
			return fmt.Errorf("%d of %d items are not readable by uid %d, the spool's owner, as whom the task runs", denied, items.Len(), owner.UID)
		}
		return nil
	})
	return items, err
}

// itemsUse says what the owner does with a task's resolved items.
type itemsUse int

const (
	// forGeneration starts the next generation (startGeneration).
	forGeneration itemsUse = iota
	// forResume resumes the generation the status describes (resumeWith).
	forResume
)

// itemsRequest asks the resolver for the items of one version of a task
// and what its batches need.
type itemsRequest struct {
	e *entry
	// task is the version resolved, hash its spec's; owner runs it.
	task  *v1alpha1.Task
	hash  string
	owner *runner.User
	use   itemsUse
	// cause says why a generation whose spec did not change runs again.
	cause string
}

// itemsResolved is the resolver's answer to req.
type itemsResolved struct {
	req   *itemsRequest
	items v1alpha1.ItemList
	ri    *runInfo
	err   error
}

// listedMark follows a spool's first listing through the resolver: it
// reaches the owner's inbox after the answers to every request the
// listing made, so the listing's tasks are in the queue once the owner
// takes it (Host.noteListed).
type listedMark struct{}

// resolver resolves items on a goroutine of its own: globbing a pattern
// over thousands of files, and the stat of every item that gives the
// input bytes per item (runInfoFor), never hold up the owner's events.
// Requests are answered in order, on the owner's inbox; a listedMark is
// passed on there (listed) in its turn.
type resolver struct {
	spoolDir, stateDir string
	requests           *inbox
	answer             func(itemsResolved)
	listed             func()
}

// run answers requests until ctx ends.
func (r *resolver) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.requests.wake:
		}
		r.answerAll()
	}
}

// answerAll answers every request waiting.
func (r *resolver) answerAll() {
	for {
		x, ok := r.requests.pop()
		if !ok {
			return
		}
		if _, ok := x.(listedMark); ok {
			r.listed()
			continue
		}
		req := x.(*itemsRequest)
		items, err := resolveItems(r.spoolDir, req.owner, req.task.Spec)
		if err != nil {
			r.answer(itemsResolved{req: req, err: err})
			continue
		}
		r.answer(itemsResolved{req: req, items: items, ri: runInfoFor(req.task, req.owner, r.spoolDir, r.stateDir, items)})
	}
}

// requestItems asks the resolver for the items of e's spec, for use;
// the answer supersedes any request still on its way for e.
// REQUIRES: owner goroutine.
func (c *Controller) requestItems(e *entry, use itemsUse, cause string) {
	req := &itemsRequest{e: e, task: e.task, hash: e.fileHash, owner: e.owner, use: use, cause: cause}
	e.resolving = req
	c.resolver.requests.push(req)
}

// takeItems carries out what the items were asked for, unless the
// request was superseded, its manifest is gone, or the controller is
// shutting down. REQUIRES: owner goroutine.
func (c *Controller) takeItems(r itemsResolved) {
	e := r.req.e
	if c.closing || !c.tasks.current(e) || e.resolving != r.req {
		return
	}
	e.resolving = nil
	switch r.req.use {
	case forResume:
		c.resumeWith(e, r)
	default:
		if !c.startGeneration(e, r.req.cause, r) {
			c.specPending(e, editWaits)
		}
	}
}

// spoolUser is who runs the tasks of a spool: nil (the controller's
// user) unless the controller runs as root and another user owns the spool
// directory; then that user, as atd and cron run a job as its owner
// (uid, gid, groups and HOME from the passwd database; a uid it does not
// know runs as that uid and the directory's gid, never as root). The spool
// accepts only files of that user and root: a root-owned manifest in a
// user's spool runs as the user too, since root cannot tell whether the
// user planted it there (a copy of a status write-back renamed away, a
// hard link).
func spoolUser(dir string) (*runner.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	if st.Uid == 0 {
		return nil, nil
	}
	u, err := runner.LookupUser(st.Uid, st.Gid)
	if err != nil {
		return &runner.User{UID: st.Uid, GID: st.Gid, Groups: []uint32{st.Gid}, Home: "/"}, nil
	}
	return u, nil
}
