package reconcile

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// resolveItems resolves a task's items. For a task run as another user
// (spoolUser), every item that is a path must be one that user may read:
// the controller resolves them with its own rights, and must not hand the
// user's batch what only root reaches (neither a name nor a content).
func (c *Controller) resolveItems(e *entry, spec v1alpha1.TaskSpec) ([]string, error) {
	if e.owner == nil {
		return v1alpha1.ResolveItems(spec, c.cfg.SpoolDir)
	}
	// Globbed as the user too: a pattern lists only what the user may.
	var items []string
	err := runner.AsUser(e.owner, func() error {
		var err error
		if items, err = v1alpha1.ResolveItems(spec, c.cfg.SpoolDir); err != nil {
			return err
		}
		denied := 0
		for _, it := range items {
			if filepath.IsAbs(it) && e.owner.MayRead(it) != nil {
				denied++
			}
		}
		if denied > 0 {
			return fmt.Errorf("%d of %d items are not readable by uid %d, the spool's owner, as whom the task runs", denied, len(items), e.owner.UID)
		}
		return nil
	})
	return items, err
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
