package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// batchesLong is the help of the batches verb.
var batchesLong = `List every finished batch the learned history holds, one row each, like
Slurm's sacct or GNU parallel's --joblog: its task, batch number (from 0,
within its generation), start, elapsed time, exit code (or the reason it
ended: MemoryExceeded, BatchTimeout, Cancelled, Evicted...), items, threads, the
memory its contract reserved, its peak (the working set where a cgroup
measured it, else the peak resident memory) and the efficiency
(peak ÷ reserved). Oldest first.

The history is the machine's (every spool's batches, by task name), or the
one --history names (a controller run with --history); it keeps
the last 128 batches of each profile. While a controller runs it holds the
store: the newest ` + strconv.Itoa(reconcile.PublishedBatchesMax) + ` batches are then read from what it publishes in
its state directory.

Output: a table in human units (default); -o tsv, a header line and
tab-separated fields in machine units (START and END in Unix seconds,
ELAPSED in seconds, bytes, EFFICIENCY a fraction, EXIT the exit code and
REASON apart); -o json, a list of objects.`

func newBatchesCommand(g *globals) *cobra.Command {
	var (
		output, profile, historyPath string
		since                        time.Duration
		a                            taskArgs
	)
	cmd := &cobra.Command{
		Use:     "batches [NAME... | -l SELECTOR]",
		Short:   "List every finished batch (accounting, like sacct): exit, elapsed, reserved and peak memory",
		Long:    batchesLong,
		Example: "  lardon3d-controller batches\n  lardon3d-controller batches features --since 24h -o tsv",
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: tsv or json (default: a table)")
	cmd.Flags().StringVar(&profile, "profile", "", "only the batches of this profile")
	cmd.Flags().DurationVar(&since, "since", 0, "only the batches that ended within this duration (e.g. 2h)")
	cmd.Flags().StringVarP(&a.selector, "selector", "l", "", "only the batches of the spool's tasks whose labels match this selector")
	historyReadFlag(cmd, &historyPath)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if output != "" && output != "tsv" && output != "json" {
			return &exitError{code: exitUsage, err: fmt.Errorf("-o %q: want tsv or json", output)}
		}
		var names []string // nil: every task
		if len(args) > 0 {
			names = args
		}
		if a.selector != "" {
			files, err := a.files(g.spool, args)
			if err != nil {
				return err
			}
			names = []string{}
			for _, f := range files {
				names = append(names, f.Name())
			}
		}
		path, err := historyToRead(historyPath)
		if err != nil {
			return err
		}
		rows, err := reconcile.ReadBatches(g.stateDir(), path)
		if err != nil {
			return &exitError{code: exitNotDone, err: err}
		}
		rows = filterBatches(rows, names, profile, since, time.Now())
		return printBatchRows(cmd.OutOrStdout(), rows, output)
	}
	return cmd
}

// filterBatches keeps the rows of the tasks names (all when nil), of
// profile (all when empty), that ended after now-since (all when 0).
func filterBatches(rows []reconcile.BatchRow, names []string, profile string, since time.Duration, now time.Time) []reconcile.BatchRow {
	return slices.DeleteFunc(rows, func(r reconcile.BatchRow) bool {
		return (names != nil && !slices.Contains(names, r.Task)) ||
			(profile != "" && r.Profile != profile) ||
			(since > 0 && r.End.Before(now.Add(-since)))
	})
}

func printBatchRows(w io.Writer, rows []reconcile.BatchRow, output string) error {
	switch output {
	case "json":
		if rows == nil {
			rows = []reconcile.BatchRow{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "tsv":
		fmt.Fprintln(w, "TASK\tGENERATION\tBATCH\tATTEMPT\tPROFILE\tSTART\tEND\tELAPSED\tEXIT\tREASON\tITEMS\tTHREADS\tRESERVED\tPEAK\tEFFICIENCY")
		unix := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1e3, 'f', 3, 64) }
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%.3f\t%d\t%s\t%d\t%d\t%d\t%d\t%.3f\n",
				tsvField(r.Task), r.Generation, r.Batch, r.Attempt, tsvField(r.Profile), unix(r.Start), unix(r.End),
				r.Elapsed().Seconds(), r.ExitCode, tsvField(r.Reason), r.Items, r.Threads, r.ReservedBytes, r.PeakBytes, r.Efficiency)
		}
		return nil
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "no batch recorded")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tBATCH\tSTART\tELAPSED\tEXIT\tITEMS\tTHREADS\tRESERVED\tPEAK\tEFFICIENCY")
	for _, r := range rows {
		exit := strconv.Itoa(r.ExitCode)
		if r.Reason != "" {
			exit = r.Reason
		}
		reserved, eff := "-", "-"
		if r.ReservedBytes > 0 {
			reserved = humanBytes(r.ReservedBytes)
			eff = fmt.Sprintf("%.0f%%", 100*r.Efficiency)
		}
		fmt.Fprintf(tw, "%s\t#%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", cell(r.Task), r.Batch,
			r.Start.Local().Format("2006-01-02 15:04:05"), elapsedCell(r.Elapsed()), cell(exit),
			r.Items, r.Threads, reserved, humanBytes(r.PeakBytes), eff)
	}
	return tw.Flush()
}

// elapsedCell rounds d for people: to the millisecond under a second, to
// the second above.
func elapsedCell(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// tsvField keeps a field on its line and in its column: tabs and line
// breaks become spaces (names and reasons hold none; a profile may).
func tsvField(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}
