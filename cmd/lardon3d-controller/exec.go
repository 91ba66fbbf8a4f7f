package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/lardon3d/lardon3d-controller/pkg/control"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

func newExecCommand() *cobra.Command {
	var (
		memory, gpuMemory string
		gpuSlots, threads int
		noWait            bool
	)
	cmd := &cobra.Command{
		Use:   "exec [--memory 4Gi] [--gpu-memory 2Gi] [--gpu-slots 1] [--threads N] [--no-wait] -- PROGRAM [ARGS...]",
		Short: "Run a program of yours under a reservation of the running controller (srun)",
		Long: `Ask the controller running on this machine (your own, else root's system
service) for a reservation, a hold, wait for it with the governor's reason
on stderr as srun does, then run PROGRAM as you, here, and release the hold
exactly once when it ends, however exec ends: the hold lasts as long as
exec's connection to the controller, so even kill -9 of exec releases it
within a moment (the program then runs on without one).

The program is never killed at its reservation: the hold keeps the batches
off that memory (no batch is admitted into it, and while the hold waits,
batches that would leave it no room wait too). budgets and get show the
holds beside the tasks. Any user may exec against root's controller: it
trusts the kernel's word on who asks, not a flag.

exec exits with the program's status (128+N when a signal N ended it), 127
when it cannot be started, 1 when no hold was granted (no controller, the
demand can never fit, --no-wait and it does not fit now).`,
		Args: cobra.MinimumNArgs(1),
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // the program's own flags are its own
	f.StringVar(&memory, "memory", "", "memory to hold (e.g. 4Gi)")
	f.StringVar(&gpuMemory, "gpu-memory", "", "GPU memory to hold (e.g. 2Gi)")
	f.IntVar(&gpuSlots, "gpu-slots", 0, "GPU slots to hold")
	f.IntVar(&threads, "threads", 1, "CPU threads to hold")
	f.BoolVar(&noWait, "no-wait", false, "fail at once when the hold does not fit now")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		d := control.Demand{GPUSlots: gpuSlots, Threads: threads, NoWait: noWait, Command: strings.Join(args, " ")}
		for _, q := range []struct {
			flag, v string
			into    *int64
		}{{"memory", memory, &d.Memory}, {"gpu-memory", gpuMemory, &d.GPUMemory}} {
			if q.v == "" {
				continue
			}
			v, err := resource.ParseQuantity(q.v)
			if err != nil || v.Sign() < 0 {
				return &exitError{code: exitUsage, err: fmt.Errorf("--%s %q: want a quantity such as 4Gi", q.flag, q.v)}
			}
			*q.into = v.Value()
		}
		if gpuSlots < 0 || threads < 1 {
			return &exitError{code: exitUsage, err: errors.New("--gpu-slots must be >= 0 and --threads >= 1")}
		}
		stderr := cmd.ErrOrStderr()
		t, err := control.Find()
		if err != nil {
			return &exitError{code: exitNotDone, err: fmt.Errorf("exec: %w", err)}
		}
		conn, err := control.Dial(t)
		if err != nil {
			return &exitError{code: exitNotDone, err: fmt.Errorf("exec: %w", err)}
		}
		defer conn.Close() // releases the hold
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
		g, err := conn.Hold(ctx, d, func(reason string) {
			fmt.Fprintf(stderr, "exec: waiting for %s: %s\n", control.FormatDemand(d), reason)
		})
		stop()
		if err != nil {
			return &exitError{code: exitNotDone, err: fmt.Errorf("exec: no hold: %w", err)}
		}
		fmt.Fprintf(stderr, "exec: hold %d granted by the controller (PID %d): memory %s, %d thread(s)%s\n",
			g.ID, t.Claim.PID, governor.FormatBytes(g.Memory), g.Threads, gpuNote(g))
		return runHeld(cmd, args)
	}
	return cmd
}

// gpuNote says the GPU part of a grant, "" when none.
func gpuNote(g control.Grant) string {
	var s string
	if g.GPUMemory > 0 {
		s += fmt.Sprintf(", GPU memory %s on %s", governor.FormatBytes(g.GPUMemory), g.GPUID)
	}
	if g.GPUSlots > 0 {
		s += fmt.Sprintf(", %d GPU slot(s)", g.GPUSlots)
	}
	return s
}

// runHeld runs the program with exec's standard streams and returns its
// status as exec's; the signals exec is sent are passed on to it.
func runHeld(cmd *cobra.Command, args []string) error {
	c := exec.Command(args[0], args[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := c.Start(); err != nil {
		return &exitError{code: 127, err: fmt.Errorf("exec: %w", err)}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = c.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := c.Wait()
	close(done)
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return &exitError{code: 128 + int(ws.Signal())}
		}
		return &exitError{code: ee.ExitCode()}
	}
	return &exitError{code: exitNotDone, err: fmt.Errorf("exec: %w", err)}
}
