package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"
	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// sampleTasks returns, per running task, what its batch uses now, as the
// runner samples a batch (runner.SampleGroup): the processes of its
// cgroup when the status names one, else of its process group.
func sampleTasks(fs procfs.FS, running []listing.File) (map[string]runner.Usage, error) {
	out := make(map[string]runner.Usage, len(running))
	for _, f := range running {
		pg := f.Task.Status.ProcessGroup
		u, err := runner.SampleGroup(fs, pg.PGID, pg.Cgroup)
		if err != nil {
			return nil, err
		}
		out[f.Task.Metadata.Name] = u
	}
	return out, nil
}

func newTopCommand(g *globals) *cobra.Command {
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "top [NAME]",
		Short: "Show the memory and CPU the running batches use now, against their contracts",
		Long: `Show, for each task with a batch in flight, what its batch uses now (its
cgroup's working set and processes, whatever their session, or without a
cgroup its process group's resident memory; CPU over --interval, in threads) against
its contract (the memory reserved, the threads granted). It reads /proc: run
it on the machine of the controller, as the same user or root.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return &exitError{code: 2, err: fmt.Errorf("--interval: must be > 0, got %s", interval)}
			}
			files, err := readSpool(g.spool)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if len(args) == 1 {
				name := taskArg(args[0])
				one := listing.SelectName(files, name)
				if len(one) == 0 {
					return &exitError{code: 1, err: unknownTaskError(g.spool, name, files)}
				}
				files = one
			}
			sortFiles(files, "queue")
			var running []listing.File
			for _, f := range files {
				if f.Task != nil && f.Task.Status.ProcessGroup != nil && f.Task.Status.ProcessGroup.PGID > 0 {
					running = append(running, f)
				}
			}
			if len(running) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "No batch is running.")
				return nil
			}
			fs, err := procfs.NewDefaultFS()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			before, err := sampleTasks(fs, running)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			start := time.Now()
			select {
			case <-cmd.Context().Done():
				return nil
			case <-time.After(interval):
			}
			after, err := sampleTasks(fs, running)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			var b strings.Builder
			printTop(&b, running, before, after, time.Since(start))
			fmt.Fprint(cmd.OutOrStdout(), safeText(b.String()))
			return nil
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how long CPU use is measured over")
	return cmd
}

// printTop prints one row per running task: memory and CPU now against
// the contract.
func printTop(w io.Writer, running []listing.File, before, after map[string]runner.Usage, over time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPHASE\tBATCH\tPROCS\tMEMORY\tCONTRACT\tMEM%\tCPU\tTHREADS\tCPU%")
	for _, f := range running {
		t := f.Task
		st := t.Status
		u := after[t.Metadata.Name]
		batch, contract, memPct, threads, cpuPct := "-", "-", "-", "-", "-"
		cpu := max(u.CPU-before[t.Metadata.Name].CPU, 0).Seconds() / over.Seconds()
		if r := st.Reservation; r != nil {
			batch = fmt.Sprintf("%d/%d", r.Batch, r.BatchRequested)
			if mem := r.Memory.Value(); mem > 0 {
				contract = humanBytes(mem)
				memPct = fmt.Sprintf("%.0f%%", 100*float64(u.Memory)/float64(mem))
			}
			if r.Threads > 0 {
				threads = fmt.Sprint(r.Threads)
				cpuPct = fmt.Sprintf("%.0f%%", 100*cpu/float64(r.Threads))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%.2f\t%s\t%s\n", cell(t.Metadata.Name), cell(f.Phase()), batch, u.Procs,
			humanBytes(u.Memory), contract, memPct, cpu, threads, cpuPct)
	}
	_ = tw.Flush()
}
