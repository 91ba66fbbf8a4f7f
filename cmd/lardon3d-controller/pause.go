package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// newPauseCommand builds `pause` (paused true) or `resume` (paused false).
func newPauseCommand(g *globals, paused bool) *cobra.Command {
	use, short := "resume NAME", "Set spec.paused: false in the task's manifest"
	if paused {
		use, short = "pause NAME", "Set spec.paused: true in the task's manifest (its processes stop, its reservation is kept)"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := findTask(g.spool, args[0])
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if f.Unparseable() {
				return &exitError{code: 1, err: fmt.Errorf("%s is not parseable YAML; fix it first", f.Path)}
			}
			// The controller's own checked write path, from the spool's
			// directory descriptor; Close waits out the displaced version's
			// grace period so that no concurrent edit is lost.
			sp, err := spool.Open(g.spool, spool.Options{AllowShared: true})
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			err = sp.SetPaused(f.Path, paused)
			sp.Close()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			verb := "resumed"
			if paused {
				verb = "paused"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s %s\n", f.Name(), verb)
			return nil
		},
	}
}
