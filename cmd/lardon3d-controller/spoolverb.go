package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/control"
)

func newSpoolCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "spool (add|remove) DIR",
		Short: "Add a spool of yours to the running controller, or remove it, without root and without a restart",
		Long: `Hand a spool directory to the controller running on this machine (your
own, else root's system service), as at hands jobs to atd: the controller
serves it as its owner's (its tasks run as you), beside its other spools,
with one memory budget and one queue, until you remove it. A user may add
only a directory they own: the directory is opened here and its descriptor
sent, so the controller judges the directory you opened, not a path that
could be swapped for another user's.

  spool add DIR      serve DIR; prints its state directory
  spool remove DIR   stop serving DIR (refused while one of its tasks holds
                     a batch); only spools added with spool add`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "add DIR",
		Short: "Serve DIR through the running controller",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			conn, _, err := dialController()
			if err != nil {
				return err
			}
			defer conn.Close()
			r, err := conn.AddSpool(args[0])
			if err != nil {
				return &exitError{code: exitNotDone, err: fmt.Errorf("spool add: %w", err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "spool %s served (state %s)\n", r.Spool, r.StateDir)
			return nil
		},
	}, &cobra.Command{
		Use:   "remove DIR",
		Short: "Stop serving DIR (added with spool add)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := removeSpool(args[0]); err != nil {
				return &exitError{code: exitNotDone, err: fmt.Errorf("spool remove: %w", err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "spool %s removed\n", args[0])
			return nil
		},
	})
	return cmd
}

// dialController connects to the controller the control socket's client
// chooses (control.Find).
func dialController() (*control.Conn, control.Target, error) {
	t, err := control.Find()
	if err != nil {
		return nil, t, &exitError{code: exitNotDone, err: err}
	}
	conn, err := control.Dial(t)
	if err != nil {
		return nil, t, &exitError{code: exitNotDone, err: err}
	}
	return conn, t, nil
}

func removeSpool(dir string) error {
	conn, _, err := dialController()
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.RemoveSpool(dir)
}

// joinRunning is run --exit-when-done --join-running on a machine where a
// controller (root's or this user's) already runs: the spool is added to
// it, waited for until every task is settled, its table printed, and
// removed. ok is false when no such controller answers (run then serves
// the spool itself).
func joinRunning(cmd *cobra.Command, dir string) (ok bool, err error) {
	conn, t, err := dialController()
	if err != nil {
		return false, nil
	}
	r, err := conn.AddSpool(dir)
	conn.Close()
	if err != nil {
		return true, &exitError{code: exitUsage, err: fmt.Errorf("the controller running on this machine (PID %d) would not serve %s: %w", t.Claim.PID, dir, err)}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "a controller already runs on this machine (PID %d, uid %d): %s is served through it until every task is settled\n", t.Claim.PID, t.Claim.UID, r.Spool)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tasks, waitErr := waitSettled(ctx, r.Spool, t.Claim.PID)
	// Removed whatever ended the wait; a batch starting meanwhile is
	// waited for.
	for i := 0; ; i++ {
		err := removeSpool(r.Spool)
		if err == nil || i >= 60 || !strings.Contains(err.Error(), "hold a batch") {
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: spool %s not removed from the controller: %v\n", r.Spool, err)
			}
			break
		}
		time.Sleep(time.Second)
	}
	if waitErr != nil {
		if ctx.Err() != nil {
			return true, &exitError{code: exitInterrupted, err: errors.New("stopped before every task settled; the spool was removed from the controller, every status is written")}
		}
		return true, &exitError{code: exitNotDone, err: waitErr}
	}
	printTable(cmd.OutOrStdout(), tasks, time.Now())
	for _, t := range tasks {
		if t.Status.Phase != v1alpha1.PhaseDone {
			return true, &exitError{code: exitNotDone}
		}
	}
	return true, nil
}

// waitSettled reads the spool until every manifest holds a task in a
// final phase, or paused; it gives up when the
// controller pid is gone or ctx ends.
func waitSettled(ctx context.Context, dir string, pid int) ([]*v1alpha1.Task, error) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		files, err := readSpool(dir)
		if err == nil && len(files) > 0 {
			var tasks []*v1alpha1.Task
			settled := true
			for _, f := range files {
				if f.Task == nil {
					continue // invalid: get shows it
				}
				tasks = append(tasks, f.Task)
				s := f.Task.Status
				final := v1alpha1.IsTerminal(s.Phase) || s.Phase == v1alpha1.PhasePaused
				settled = settled && final
			}
			if settled {
				return tasks, nil
			}
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			return nil, fmt.Errorf("the controller (PID %d) stopped before every task settled", pid)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}
