package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// newPauseCommand builds `pause` (paused true) or `resume` (paused false).
func newPauseCommand(g *globals, paused bool) *cobra.Command {
	a := &taskArgs{}
	use, short, verb := "resume (NAME... | -l SELECTOR | --all)", "Set spec.paused: false in the tasks' manifests", "resumed"
	if paused {
		use, short, verb = "pause (NAME... | -l SELECTOR | --all)", "Set spec.paused: true in the tasks' manifests (their processes stop, their reservations are kept)", "paused"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := a.files(g.spool, args)
			if err != nil {
				return err
			}
			if a.noneSelected(cmd.ErrOrStderr(), files) {
				return nil
			}
			if err := refuseUnparseable(files); err != nil {
				return err
			}
			// The controller's own checked write path, from the spool's
			// directory descriptor; Close waits out the displaced versions'
			// grace period so that no concurrent edit is lost.
			sp, err := spool.Open(g.spool, spool.Options{AllowShared: true})
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			defer sp.Close()
			for _, f := range files {
				if err := sp.SetPaused(f.Path, paused); err != nil {
					return &exitError{code: 1, err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "task %s %s\n", cell(f.Name()), verb)
			}
			return nil
		},
	}
	a.addFlags(cmd, true)
	return cmd
}
