package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

func newDeleteCommand(g *globals) *cobra.Command {
	a := &taskArgs{}
	cmd := &cobra.Command{
		Use:   "delete (NAME... | -l SELECTOR)",
		Short: "Remove tasks' manifests from the spool; the controller cancels what runs and forgets them",
		Long: `Remove tasks' manifests from the spool; the controller cancels what runs
and forgets them. Named tasks are deleted all or none: one unknown name and
nothing is deleted. A name that several files claim goes with all of them.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := a.files(g.spool, args)
			if err != nil {
				return err
			}
			if a.noneSelected(cmd.ErrOrStderr(), files) {
				return nil
			}
			for _, f := range files {
				if err := removeManifest(g.spool, f); err != nil {
					return &exitError{code: 1, err: err}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "task %s deleted (%s)\n", cell(f.Name()), cell(filepath.Base(f.Path)))
			}
			return nil
		},
	}
	a.addFlags(cmd, false)
	return cmd
}

// removeManifest removes f's name from the spool directory. The file was
// found by readSpool, through the spool's checked read path; what goes is
// the directory entry only, never what a symlink points to.
func removeManifest(dir string, f listing.File) error {
	path := filepath.Join(dir, filepath.Base(f.Path))
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("delete %s: %w", f.Name(), err)
	}
	return nil
}
