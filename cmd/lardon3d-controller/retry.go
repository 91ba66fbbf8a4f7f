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
	return &cobra.Command{
		Use:   "retry NAME...",
		Short: "Run Failed or Rejected tasks again: a new generation, from their committed progress",
		Long: `Run Failed or Rejected tasks again without editing their files by hand:
retry writes a new spec.retryToken into each manifest, which the controller
takes as the task's next generation (as any spec edit). The items a failed
generation committed are not run again; a task Rejected because its
items.glob matched nothing resolves it anew. Tasks in another phase are
refused: a running task needs no retry, a Done one an edit.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var files []listing.File
			for _, a := range args {
				f, err := findTask(g.spool, a)
				if err != nil {
					return &exitError{code: 1, err: err}
				}
				if f.Unparseable() {
					return &exitError{code: 1, err: fmt.Errorf("%s is not parseable YAML; fix it first", f.Path)}
				}
				if p := f.Task.Status.Phase; p != v1alpha1.PhaseFailed && p != v1alpha1.PhaseRejected {
					if p == "" {
						p = "not yet seen by a controller"
					}
					return &exitError{code: 1, err: fmt.Errorf("task %s is %s: only a Failed or Rejected task is retried", f.Name(), p)}
				}
				files = append(files, f)
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
				fmt.Fprintf(cmd.OutOrStdout(), "task %s retried (generation %d was %s)\n", f.Name(), f.Task.Status.ObservedGeneration, f.Task.Status.Phase)
			}
			return nil
		},
	}
}
