package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func newValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check manifests offline; exit non-zero on any error",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := 0
			for _, path := range args {
				data, err := os.ReadFile(path)
				if err == nil {
					_, err = v1alpha1.ParseManifest(filepath.Base(path), data)
				}
				if err != nil {
					bad++
					fmt.Fprintf(cmd.OutOrStdout(), "%s: invalid\n", path)
					for _, line := range splitLines(err.Error()) {
						fmt.Fprintf(cmd.OutOrStdout(), "  %s\n", line)
					}
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: valid\n", path)
			}
			if bad > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d manifests invalid", bad, len(args))}
			}
			return nil
		},
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
