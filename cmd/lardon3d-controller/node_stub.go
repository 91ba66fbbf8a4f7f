//go:build !lardon3d_node

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// newNodeCommand is the node verb of the default binary: it runs the
// companion binary with the same arguments, found beside this executable
// first, then in PATH.
func newNodeCommand(_ *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "node",
		Short: "Run a node agent: the same controller, taking its Tasks from a Kubernetes API server",
		Long: `Run a node agent on a Kubernetes cluster (see "Running on Kubernetes" in
the README). The agent is the companion binary ` + nodeBinary + `, found beside
this one or in PATH (make build builds both); this verb runs it with the same
arguments.`,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			path, err := findNodeBinary()
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			argv := append([]string{path, "node"}, args...)
			return &exitError{code: exitUsage, err: fmt.Errorf("run %s: %w", path, syscall.Exec(path, argv, os.Environ()))}
		},
	}
}

// findNodeBinary returns the companion binary's path.
func findNodeBinary() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), nodeBinary)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(nodeBinary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("the node agent is the companion binary %s, found neither beside this executable nor in PATH: build it with `make build` (go build -tags lardon3d_node -o bin/%s ./cmd/lardon3d-controller)", nodeBinary, nodeBinary)
}
