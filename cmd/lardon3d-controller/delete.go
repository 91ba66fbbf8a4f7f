package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

func newDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME...",
		Short: "Remove tasks' manifests from the spool; the controller cancels what runs and forgets them",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := deletionTargets(g.spool, args)
			if err != nil {
				return &exitError{code: 1, err: err}
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
}

// deletionTargets finds the manifests of every name, all or none: one
// unknown name and nothing is deleted. A name given twice is deleted once;
// a name that several files claim (a duplicate) goes with all of them.
func deletionTargets(dir string, names []string) ([]listing.File, error) {
	files, err := readSpool(dir)
	if err != nil {
		return nil, err
	}
	var out []listing.File
	seen := map[string]bool{}
	for _, arg := range names {
		name := taskArg(arg)
		if seen[name] {
			continue
		}
		seen[name] = true
		var named []listing.File
		for _, f := range files {
			if f.Name() == name {
				named = append(named, f)
			}
		}
		if len(named) == 0 {
			return nil, unknownTaskError(dir, name, files)
		}
		out = append(out, named...)
	}
	return out, nil
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
