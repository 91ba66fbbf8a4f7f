package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

func newBudgetsCommand(g *globals) *cobra.Command {
	var stateDir string
	var output string
	cmd := &cobra.Command{
		Use:   "budgets",
		Short: "Show each budget's capacity, margin, reserved and free, and the machine's signals",
		Args:  cobra.NoArgs,
	}
	loadBudgets := budgetFlags(cmd)
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "the controller's state directory (default SPOOL/.lardon3d)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json (default: a table)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if stateDir == "" {
			stateDir = filepath.Join(g.spool, ".lardon3d")
		}
		w := cmd.OutOrStdout()
		// A running controller publishes its live view; use it when fresh.
		if view, at, err := reconcile.ReadBudgets(stateDir); err == nil && time.Since(at) < 10*time.Second {
			return printBudgets(w, view, output, fmt.Sprintf("live, from the controller running on %s (%s ago)", g.spool, time.Since(at).Round(time.Second)), nil)
		}
		bc, err := loadBudgets()
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		gov, _, err := newMachine(bc, "")
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer gov.Close()
		warns := bc.warnings()
		if w := bc.capWarning(gov); w != "" {
			warns = append(warns, w)
		}
		for _, w := range warns {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
		}
		// No controller runs: what the files say is reserved is stale.
		var held []string
		if files, err := readSpool(g.spool); err == nil {
			for _, f := range files {
				if f.task != nil && f.task.Status.Reservation != nil && !v1alpha1.IsTerminal(f.task.Status.Phase) {
					held = append(held, fmt.Sprintf("%s (%s, %s)", f.name(), f.task.Status.Phase, f.task.Status.Reservation.Memory.String()))
				}
			}
		}
		return printBudgets(w, gov.Budgets(), output, "probed now; no controller is running on "+g.spool, held)
	}
	return cmd
}

func printBudgets(w io.Writer, v governor.BudgetsView, output, source string, stale []string) error {
	if output == "json" {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	if output != "" {
		return &exitError{code: 2, err: fmt.Errorf("-o %q: want json", output)}
	}
	fmt.Fprintf(w, "Budgets (%s)\n", source)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "BUDGET\tCAPACITY\tMARGIN\tRESERVED\tFREE")
	row := func(name string, b governor.BudgetState, bytes bool) {
		f := func(n int64) string { return fmt.Sprint(n) }
		if bytes {
			f = humanBytes
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, f(b.Capacity), f(b.Margin), f(b.Reserved), f(b.Free))
	}
	row("memory", v.Memory, true)
	row("cpu threads", v.CPU, false)
	row("io slots", v.IOSlots, false)
	row("gpu slots", v.GPUSlots, false)
	for _, gpu := range v.GPUs {
		name := "gpu " + gpu.ID + " memory"
		switch {
		case !gpu.Known:
			fmt.Fprintf(tw, "%s\tunknown\t-\t-\t-\n", name)
		case gpu.Unified:
			fmt.Fprintf(tw, "%s\tunified (in memory)\t-\t-\t-\n", name)
		default:
			row(name, gpu.Memory, true)
		}
	}
	for _, s := range v.Scratch {
		row("scratch "+s.Path, s.Bytes, true)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nReservations: %d active\n", v.Reservations)
	fmt.Fprintf(w, "Memory available (kernel): %s\n", humanBytes(v.MemAvailable))
	fmt.Fprintf(w, "Load: %.2f %.2f %.2f (threshold %.2f, deferring: %v)\n", v.Load1, v.Load5, v.Load15, v.LoadThreshold, v.LoadDeferred)
	if v.PSI.Available {
		fmt.Fprintf(w, "PSI some avg10: cpu %.1f%%, io %.1f%% (threshold %.1f%%, deferring: %v), memory %.1f%%\n",
			v.PSI.CPU.SomeAvg10, v.PSI.IO.SomeAvg10, v.IOPressureThreshold, v.IODeferred, v.PSI.Memory.SomeAvg10)
	} else {
		fmt.Fprintln(w, "PSI: not available on this kernel")
	}
	fmt.Fprintf(w, "Swap: %s free of %s; zram: %s free of %s (never counted as memory)\n",
		humanBytes(v.SwapFree), humanBytes(v.SwapTotal), humanBytes(v.ZramFree), humanBytes(v.ZramTotal))
	if len(stale) > 0 {
		fmt.Fprintf(w, "\nManifests still showing a reservation from a stopped controller (released on its next start):\n")
		for _, s := range stale {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	return nil
}

func humanBytes(n int64) string { return governor.FormatBytes(n) }
