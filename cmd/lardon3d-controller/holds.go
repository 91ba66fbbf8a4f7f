package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/control"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
)

// controlBudgets asks the controller serving spool, over its control
// socket, for its budgets and holds; ok is false when none answers (or
// the verb was pointed at another state directory: the file published
// there is what it reads).
func controlBudgets(spool, stateDirFlag string) (r control.Reply, pid int, ok bool) {
	if stateDirFlag != "" {
		return r, 0, false
	}
	claim, serving, _ := registry.Serving(spool)
	if !serving {
		return r, 0, false
	}
	t, found := control.TargetOf(claim)
	if !found {
		return r, 0, false
	}
	conn, err := control.Dial(t)
	if err != nil {
		return r, 0, false
	}
	defer conn.Close()
	r, err = conn.Budgets()
	if err != nil || r.Budgets == nil {
		return r, 0, false
	}
	return r, t.Claim.PID, true
}

// printHolds lists the exec holds, as budgets and get show them beside
// the tasks; nothing when there are none.
func printHolds(w io.Writer, holds []control.HoldInfo) {
	if len(holds) == 0 {
		return
	}
	fmt.Fprintf(w, "\nHolds (exec, programs of users run under a reservation):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "HOLD\tUSER\tPID\tSTATE\tMEMORY\tGPU MEMORY\tTHREADS\tAGE\tCOMMAND")
	for _, h := range holds {
		state, mem, gpu, threads := "Waiting", h.Demand.Memory, h.Demand.GPUMemory, max(h.Demand.Threads, 1)
		if h.Grant != nil {
			state, mem, gpu, threads = "Held", h.Grant.Memory, h.Grant.GPUMemory, h.Grant.Threads
		}
		gpuText := "-"
		if gpu > 0 {
			gpuText = governor.FormatBytes(gpu)
		}
		fmt.Fprintf(tw, "hold/%d\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", h.ID, cell(h.User), h.PID, state,
			governor.FormatBytes(mem), gpuText, threads, time.Since(h.Since).Round(time.Second), cell(h.Command))
	}
	_ = tw.Flush()
	for _, h := range holds {
		if h.Grant == nil && h.Reason != "" {
			fmt.Fprintf(w, "  hold/%d waits: %s\n", h.ID, h.Reason)
		}
	}
}
