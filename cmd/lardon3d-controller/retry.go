package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// newRetryCommand builds `retry`: a new spec.retryToken in each named
// manifest, which the controller takes as the task's next generation.
func newRetryCommand(g *globals) *cobra.Command {
	a := &taskArgs{}
	cmd := &cobra.Command{
		Use:   "retry (NAME... | -l SELECTOR | --all)",
		Short: "Run Failed or Rejected tasks again from their committed progress, or a named Done task again from its first item",
		Long: `Run Failed or Rejected tasks again without editing their files by hand:
retry writes a new spec.retryToken into each manifest, which the controller
takes as the task's next generation (as any spec edit). The items a failed
generation committed are not run again; a task Rejected because its
items.glob matched nothing resolves it anew. A Done task named runs again
from its first item, every item (as an edit of a Done task does), and then
its Done dependents. A named task in another phase is refused (and nothing
is retried): it has not ended. With -l or --all, only the Failed and
Rejected tasks among those selected are retried, the others (Done ones
included) left alone.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			selected, err := a.parsedFiles(g.spool, args)
			if err != nil {
				return err
			}
			var files []listing.File
			for _, f := range selected {
				switch p := f.Task.Status.Phase; {
				case p == v1alpha1.PhaseFailed, p == v1alpha1.PhaseRejected:
				case p == v1alpha1.PhaseDone && a.byName():
				case !a.byName():
					continue
				default:
					return &exitError{code: 1, err: fmt.Errorf("task %s is %s: only a Failed, Rejected or Done task is retried (a Done one by its name)", f.Name(), phaseWord(p))}
				}
				files = append(files, f)
			}
			if a.noneSelected(cmd.ErrOrStderr(), files) {
				return nil
			}
			return setTokens(g, files, "retry-", (*spool.Spool).SetRetryToken, func(f listing.File) string {
				st := f.Task.Status
				if st.Phase == v1alpha1.PhaseDone {
					return fmt.Sprintf("task %s retried (generation %d was Done): it runs again from its first item", cell(f.Name()), st.ObservedGeneration)
				}
				return fmt.Sprintf("task %s retried (generation %d was %s)", cell(f.Name()), st.ObservedGeneration, st.Phase)
			}, cmd)
		},
	}
	a.addFlags(cmd, true)
	return cmd
}

// setTokens writes a new token (prefix and the time) with set into each of
// files through the controller's own checked write path, and says done(f)
// for each.
func setTokens(g *globals, files []listing.File, prefix string, set func(*spool.Spool, string, string) error, done func(listing.File) string, cmd *cobra.Command) error {
	sp, err := spool.Open(g.spool, spool.Options{AllowShared: true})
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	defer sp.Close()
	token := prefix + time.Now().UTC().Format("20060102T150405.000000000Z")
	for _, f := range files {
		if err := set(sp, f.Path, token); err != nil {
			return &exitError{code: 1, err: err}
		}
		fmt.Fprintln(cmd.OutOrStdout(), done(f))
	}
	return nil
}
