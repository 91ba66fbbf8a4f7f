package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"
	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
)

// groupUsage is what the processes of one batch use now.
type groupUsage struct {
	procs int
	rss   int64   // bytes: the cgroup's working set, or the group's resident memory
	cpu   float64 // seconds of CPU time, children reaped included
}

// sampleTasks returns, per running task, what its batch uses now: the
// processes of its cgroup when the status names one (all of them, whatever
// their session), else of its process group, read from /proc.
func sampleTasks(fs procfs.FS, tasks []*v1alpha1.Task) (map[string]groupUsage, error) {
	out := make(map[string]groupUsage, len(tasks))
	byGroup := map[int]string{}
	byPid := map[int]string{}
	for _, t := range tasks {
		pg := t.Status.ProcessGroup
		if pg.Cgroup == "" {
			byGroup[pg.PGID] = t.Metadata.Name
			continue
		}
		g, err := cgroup.LoadDir(pg.Cgroup)
		if err != nil {
			byGroup[pg.PGID] = t.Metadata.Name // ended meanwhile, or not readable
			continue
		}
		var u groupUsage
		if m, err := g.Memory(); err == nil {
			u.rss = m.WorkingSet
		}
		live, _ := g.Live()
		for _, pid := range live {
			byPid[pid] = t.Metadata.Name
		}
		out[t.Metadata.Name] = u
	}
	add := func(name string, st procfs.ProcStat, countRSS bool) {
		u := out[name]
		u.procs++
		if countRSS {
			u.rss += int64(st.ResidentMemory())
		}
		u.cpu += st.CPUTime() + float64(st.CUTime+st.CSTime)/100
		out[name] = u
	}
	for pid, name := range byPid {
		if p, err := fs.Proc(pid); err == nil {
			if st, err := p.Stat(); err == nil {
				add(name, st, false) // the cgroup's working set is the memory
			}
		}
	}
	if len(byGroup) == 0 {
		return out, nil
	}
	// Without a cgroup, a group's members are found by reading every
	// process.
	procs, err := fs.AllProcs()
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue // gone meanwhile
		}
		if name := byGroup[st.PGRP]; name != "" {
			add(name, st, true)
		}
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
				one := selectName(files, name)
				if len(one) == 0 {
					return &exitError{code: 1, err: unknownTaskError(g.spool, name, files)}
				}
				files = one
			}
			sortFiles(files, "queue")
			var running []*v1alpha1.Task
			for _, f := range files {
				if f.Task != nil && f.Task.Status.ProcessGroup != nil && f.Task.Status.ProcessGroup.PGID > 0 {
					running = append(running, f.Task)
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
func printTop(w io.Writer, tasks []*v1alpha1.Task, before, after map[string]groupUsage, over time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPHASE\tBATCH\tPROCS\tMEMORY\tCONTRACT\tMEM%\tCPU\tTHREADS\tCPU%")
	for _, t := range tasks {
		st := t.Status
		u := after[t.Metadata.Name]
		batch, contract, memPct, threads, cpuPct := "-", "-", "-", "-", "-"
		cpu := max(u.cpu-before[t.Metadata.Name].cpu, 0) / over.Seconds()
		if r := st.Reservation; r != nil {
			batch = fmt.Sprintf("%d/%d", r.Batch, r.BatchRequested)
			if mem := r.Memory.Value(); mem > 0 {
				contract = humanBytes(mem)
				memPct = fmt.Sprintf("%.0f%%", 100*float64(u.rss)/float64(mem))
			}
			if r.Threads > 0 {
				threads = fmt.Sprint(r.Threads)
				cpuPct = fmt.Sprintf("%.0f%%", 100*cpu/float64(r.Threads))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%.2f\t%s\t%s\n", cell(t.Metadata.Name), cell(string(st.Phase)), batch, u.procs,
			humanBytes(u.rss), contract, memPct, cpu, threads, cpuPct)
	}
	_ = tw.Flush()
}
