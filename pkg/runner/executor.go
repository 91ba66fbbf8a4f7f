package runner

import (
	"context"
	"strings"
	"time"
)

// Executor starts batches: the one seam between what decides a batch (the
// queue, the reconciler) and what runs it. Processes runs each batch as
// processes of this machine; package kube's Pods runs each as a Pod. Both
// honour the same Spec and report the same Result.
type Executor interface {
	// Start launches the batch spec describes. Its errors are Start's: a
	// *PrepareError when it may pass, ErrCommandNotFound, ErrInvalidSpec
	// and ErrRunAsUser as they are.
	Start(ctx context.Context, spec Spec) (Execution, error)
}

// Execution is one batch in flight.
type Execution interface {
	// Pause stops the batch, keeping what it was granted; Resume goes on.
	Pause() error
	Resume() error
	// Cancel ends the batch (Result.Reason ReasonCancelled).
	Cancel()
	// Wait blocks until the batch ended and nothing of it runs.
	Wait() Result
	// Done is closed when Wait would not block.
	Done() <-chan struct{}
	// Group is the batch's process group on this machine, for a restarted
	// controller to kill; the zero ProcessGroup when it has none here.
	Group() ProcessGroup
	// MemoryBytes is the batch's memory at its last sample (0: unknown).
	MemoryBytes() int64
	// Started is when the batch started.
	Started() time.Time
}

// Processes is the Executor of the spool mode: Start.
type Processes struct{}

// Start is runner.Start.
func (Processes) Start(ctx context.Context, spec Spec) (Execution, error) {
	b, err := Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// ContainerEnv is the environment and the expanded command of a batch
// that does not inherit the controller's environment (a container): the
// LARDON3D_* and thread variables, then spec.Env in order, each value
// expanded against what precedes it, with LARDON3D_ITEMS_FILE itemsFile.
func ContainerEnv(spec Spec, itemsFile string) (env []EnvVar, argv []string, err error) {
	list, argv, err := buildEnv(nil, Spec{
		Task: spec.Task, Env: spec.Env, Command: spec.Command, Items: spec.Items, ItemCount: spec.ItemCount,
		BatchIndex: spec.BatchIndex, BatchStart: spec.BatchStart, ItemsTotal: spec.ItemsTotal,
		MemoryLimit: spec.MemoryLimit, ScratchDir: spec.ScratchDir, Threads: spec.Threads,
	}, itemsFile)
	if err != nil {
		return nil, nil, err
	}
	env = make([]EnvVar, 0, len(list))
	for _, kv := range list {
		name, value, _ := strings.Cut(kv, "=")
		env = append(env, EnvVar{Name: name, Value: value})
	}
	return env, argv, nil
}
