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
		Short: "Run Failed or Rejected tasks again: a new generation, from their committed progress",
		Long: `Run Failed or Rejected tasks again without editing their files by hand:
retry writes a new spec.retryToken into each manifest, which the controller
takes as the task's next generation (as any spec edit). The items a failed
generation committed are not run again; a task Rejected because its
items.glob matched nothing resolves it anew. A named task in another phase
is refused (and nothing is retried): a running task needs no retry, a Done
one an edit. With -l or --all, the Failed and Rejected tasks among those
selected are retried, the others left alone.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			selected, err := a.files(g.spool, args)
			if err != nil {
				return err
			}
			if err := refuseUnparseable(selected); err != nil && a.byName() {
				return err
			}
			var files []listing.File
			for _, f := range selected {
				if f.Unparseable() {
					continue
				}
				if p := f.Task.Status.Phase; p != v1alpha1.PhaseFailed && p != v1alpha1.PhaseRejected {
					if !a.byName() {
						continue
					}
					if p == "" {
						p = "not yet seen by a controller"
					}
					return &exitError{code: 1, err: fmt.Errorf("task %s is %s: only a Failed or Rejected task is retried", f.Name(), p)}
				}
				files = append(files, f)
			}
			if a.noneSelected(cmd.ErrOrStderr(), files) {
				return nil
			}
			sp, err := spool.Open(g.spool, spool.Options{AllowShared: true})
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			defer sp.Close()
			token := "retry-" + time.Now().UTC().Format("20060102T150405.000000000Z")
			for _, f := range files {
				if err := sp.SetRetryToken(f.Path, token); err != nil {
					return &exitError{code: 1, err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "task %s retried (generation %d was %s)\n", cell(f.Name()), f.Task.Status.ObservedGeneration, f.Task.Status.Phase)
			}
			return nil
		},
	}
	a.addFlags(cmd, true)
	return cmd
}
