package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

func newDescribeCommand(g *globals) *cobra.Command {
	a := &taskArgs{}
	cmd := &cobra.Command{
		Use:   "describe (NAME... | -l SELECTOR | --all)",
		Short: "Tell tasks' whole story: spec, contract, conditions, batches, why they wait",
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := a.files(g.spool, args)
			if err != nil {
				return err
			}
			if a.noneSelected(cmd.ErrOrStderr(), files) {
				return nil
			}
			stateDir := g.stateDir()
			est, _ := reconcile.ReadEstimates(stateDir, defaultHistoryPath())
			errs, _ := reconcile.ReadWriteErrors(stateDir)
			serving := servingLine(g.spool)
			if !serving.none {
				serving.share = shareLine(stateDir)
			}
			for i, f := range files {
				if i > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				describeFile(cmd.OutOrStdout(), f, stateDir, est, errs, serving)
			}
			return nil
		},
	}
	a.addFlags(cmd, true)
	return cmd
}

// describeFile prints f's story (describe, then its batches from its log
// in stateDir), with the learned estimate of its profile among est and the
// failure to write its status among errs, as the controller publishes
// them. The log shown and read is where the controller keeps it
// (reconcile.TaskLogPath), whatever the manifest's status.logFile says.
func describeFile(w io.Writer, f listing.File, stateDir string, est []reconcile.ProfileEstimate, errs map[string]reconcile.WriteError, serving spoolController) {
	var learned *reconcile.ProfileEstimate
	if f.Task != nil {
		profile := reconcile.ProfileOf(&f.Task.Spec)
		for i := range est {
			if est[i].Profile == profile {
				learned = &est[i]
			}
		}
	}
	if f.Task != nil && f.Task.Status.LogFile != "" {
		t := *f.Task
		t.Status.LogFile = reconcile.TaskLogPath(stateDir, f.Name())
		f.Task = &t
	}
	describe(w, f, learned, serving, time.Now())
	var batches strings.Builder
	printBatches(&batches, f, stateDir)
	fmt.Fprint(w, safeText(batches.String()))
	// A status the controller cannot write is not in the file: it
	// publishes the failure in its state directory.
	if we, ok := errs[f.Name()]; ok {
		fmt.Fprintf(w, "Status write:  failing since %s (%d attempts, retrying): %s\n",
			we.Since.Format(time.RFC3339), we.Attempts, we.Error)
	}
}

// describe prints a task's story. Every value from the file (or its
// name) is escaped (cell), and the whole text again (safeText).
func describe(w io.Writer, f listing.File, learned *reconcile.ProfileEstimate, controller spoolController, now time.Time) {
	var buf strings.Builder
	describeTo(&buf, f, learned, controller, now)
	fmt.Fprint(w, safeText(buf.String()))
}

// describeTo writes what describe shows; controller says which controller
// serves the spool, or that none does (line "": not said).
func describeTo(w io.Writer, f listing.File, learned *reconcile.ProfileEstimate, controller spoolController, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "Name:\t%s\n", cell(f.Name()))
	fmt.Fprintf(tw, "File:\t%s\n", cell(f.Path))
	if f.Unparseable() {
		fmt.Fprintf(tw, "Phase:\tInvalid (the file is not parseable YAML or cannot be read, and is never rewritten)\n")
		fmt.Fprintf(tw, "Error:\t%s\n", cell(fmt.Sprint(f.Err)))
		return
	}
	t := f.Task
	sp, st := t.Spec, t.Status
	if f.Err != nil {
		lines := strings.Split(f.Err.Error(), "\n")
		for i := range lines {
			lines[i] = cell(lines[i])
		}
		if st.Phase == "" {
			fmt.Fprintf(tw, "Phase:\tInvalid (refused; the controller cannot write a status into this file)\n")
		}
		fmt.Fprintf(tw, "Errors:\t%s\n", strings.Join(lines, "\n\t"))
	}
	switch {
	case st.Phase != "":
		fmt.Fprintf(tw, "Phase:\t%s\n", cell(string(st.Phase)))
	case f.Err == nil:
		// As get lists it.
		fmt.Fprintf(tw, "Phase:\t%s (no controller has read this manifest yet)\n", listing.PhaseNew)
	}
	if st.ObservedGeneration == 0 && st.Phase == "" {
		fmt.Fprintf(tw, "Generation:\tnot observed yet (no controller has read this manifest)\n")
	} else {
		fmt.Fprintf(tw, "Generation:\t%d observed\n", st.ObservedGeneration)
	}
	if line := controller.line; line != "" {
		if controller.none && st.Phase != "" && !v1alpha1.IsTerminal(st.Phase) {
			line += "; the status below is as the last controller left it"
		}
		fmt.Fprintf(tw, "Controller:\t%s\n", cell(line))
	}
	if sp.Priority != nil {
		fmt.Fprintf(tw, "Priority:\t%s\n", cell(sp.Priority.String()))
	}
	if controller.share != "" && !v1alpha1.IsTerminal(st.Phase) {
		fmt.Fprintf(tw, "Fair share:\t%s\n", cell(controller.share))
	}
	fmt.Fprintf(tw, "Class:\t%s\n", cell(orDash(string(sp.Class))))
	fmt.Fprintf(tw, "Command:\t%s\n", cell(strings.Join(sp.Command, " ")))
	if sp.WorkingDir != "" {
		fmt.Fprintf(tw, "Working dir:\t%s\n", cell(sp.WorkingDir))
	}
	fmt.Fprintf(tw, "Items:\t%s\n", cell(itemsSummary(sp.Items)))
	if len(sp.DependsOn) > 0 {
		fmt.Fprintf(tw, "Depends on:\t%s\n", cell(strings.Join(sp.DependsOn, ", ")))
	}
	r := sp.Resources
	fmt.Fprintf(tw, "Estimate:\tfixed %s + %s per item + %s per thread; batch %s; threads %d (min %d); io slots %d; gpu slots %d\n",
		qty(r.Fixed.Memory), qty(r.PerItem.Memory), qty(r.PerThread.Memory), batchBounds(r.Batch, max(st.Progress.ItemsTotal, declaredItems(sp.Items))), r.Threads, r.MinThreads, r.IOSlots, r.GPUSlots)
	describeLearned(tw, &sp, &st, learned)
	fmt.Fprintf(tw, "Retries:\t%d\n", sp.Retries)
	if sp.BatchTimeout != nil {
		fmt.Fprintf(tw, "Batch timeout:\t%s\n", sp.BatchTimeout.Duration)
	}
	if sp.Paused {
		fmt.Fprintf(tw, "Paused:\ttrue\n")
	}
	fmt.Fprintf(tw, "Progress:\t%s\n", progressText(st, sp.Items))
	reported, size, ran, running := reconcile.RunningReport(f.Row, now)
	elapsed, expected, timed := reconcile.ExpectedRun(f.Row, learned, now)
	switch {
	case running && reported > 0:
		fmt.Fprintf(tw, "Running batch:\t%d of its %d items reported done after %s (not committed until it exits 0)\n",
			reported, size, ran.Round(time.Second))
	case timed:
		fmt.Fprintf(tw, "Running batch:\t~%d%%: no progress reported; it has run %s of the %s a batch of %s takes at the profile's pace\n",
			reconcile.ExpectedPercent(elapsed, expected), elapsed.Round(time.Second), expected.Round(time.Second), governor.Count(f.Row.LastBatch.Size, "item"))
	case running:
		fmt.Fprintf(tw, "Running batch:\t%d of its %d items reported done after %s (not committed until it exits 0)\n",
			reported, size, ran.Round(time.Second))
	}
	if d, ok := reconcile.TaskETA(f.Row, learned, now); ok {
		left := st.Progress.ItemsTotal - st.Progress.ItemsDone
		// What reconcile.TaskETA priced the items with.
		paced := running && reported > 0
		how := "the running batch's pace"
		if learned != nil && learned.DurationPerItem > 0 {
			how = fmt.Sprintf("%s per item from the profile's batches", learned.DurationPerItem.Round(time.Millisecond))
			if paced {
				how += ", and the running batch's pace"
			}
		}
		if timed {
			how = fmt.Sprintf("the profile's %s per batch and %s per item, less the running batch's time so far", learned.DurationFixed.Round(time.Millisecond), learned.DurationPerItem.Round(time.Millisecond))
		}
		fmt.Fprintf(tw, "ETA:\t%s for %d items left (%s)\n", d.Round(time.Second), left, how)
	}
	if c := st.Reservation; c != nil {
		fmt.Fprintf(tw, "Contract:\tbatch %d of %d asked, %s, %s memory, %s, %s, granted %s ago (governor generation %d)\n",
			c.Batch, c.BatchRequested, governor.Count(int64(c.Threads), "thread"), humanBytes(c.Memory.Value()), governor.Count(int64(c.IOSlots), "io slot"), governor.Count(int64(c.GPUSlots), "gpu slot"), now.Sub(c.GrantedAt.Time).Round(time.Second), c.Generation)
	} else {
		fmt.Fprintf(tw, "Contract:\tnone\n")
	}
	if lb := st.LastBatch; lb != nil {
		line := fmt.Sprintf("#%d items %s, %s, attempt %d", lb.Index, itemSpan(lb.Start, lb.Size), governor.Count(int64(lb.Threads), "thread"), lb.Attempt)
		if lb.EndTime != nil && lb.StartTime != nil {
			line += fmt.Sprintf(", ran %s", lb.EndTime.Sub(lb.StartTime.Time).Round(time.Millisecond))
		} else if lb.StartTime != nil {
			line += fmt.Sprintf(", running for %s", runningFor(lb, now).Round(time.Second))
			if lb.PausedSince != nil || lb.PausedSeconds > 0 {
				line += " (paused time not counted)"
			}
		}
		if lb.ExitCode != nil {
			line += fmt.Sprintf(", exit %d", *lb.ExitCode)
		}
		if lb.Reason != "" {
			line += ", " + cell(lb.Reason)
		}
		if lb.PeakMemory != nil {
			line += ", peak " + humanBytes(lb.PeakMemory.Value())
		}
		if lb.WorkingSet != nil {
			line += ", working set " + humanBytes(lb.WorkingSet.Value())
		}
		if lb.PeakGPUMemory != nil {
			line += ", GPU memory " + humanBytes(lb.PeakGPUMemory.Value())
		}
		fmt.Fprintf(tw, "Last batch:\t%s\n", line)
	}
	if st.CreationTime != nil {
		fmt.Fprintf(tw, "Created:\t%s (%s ago)\n", st.CreationTime.Format(time.RFC3339), duration.HumanDuration(now.Sub(st.CreationTime.Time)))
	}
	if st.StartTime != nil {
		fmt.Fprintf(tw, "Started:\t%s\n", st.StartTime.Format(time.RFC3339))
	}
	if st.CompletionTime != nil {
		fmt.Fprintf(tw, "Completed:\t%s\n", st.CompletionTime.Format(time.RFC3339))
	}
	if st.LogFile != "" {
		fmt.Fprintf(tw, "Log:\t%s\n", cell(st.LogFile))
	}
	if len(st.Conditions) > 0 {
		fmt.Fprintf(tw, "Conditions:\n  TYPE\tSTATUS\tREASON\tAGE\tMESSAGE\n")
		for _, c := range st.Conditions {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", cell(c.Type), cell(string(c.Status)), cell(c.Reason), now.Sub(c.LastTransitionTime.Time).Round(time.Second), cell(c.Message))
		}
	}
}

// itemSpan renders the items of a batch as the runner's log header does:
// first..last, both included.
func itemSpan(start, size int64) string {
	if size <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d", start, start+size-1)
}

// batchBounds renders spec.resources.batch: a glob's max stays 0 until its
// items are resolved (v1alpha1.SetDefaults), then the item count.
func batchBounds(b v1alpha1.BatchBounds, itemsTotal int64) string {
	switch {
	case b.Max > 0:
		return fmt.Sprintf("%d..%d", b.Min, b.Max)
	case itemsTotal > 0:
		return fmt.Sprintf("%d..%d (the item count)", b.Min, b.EffectiveMax(itemsTotal))
	}
	return fmt.Sprintf("%d..the item count", b.Min)
}

// progressText is the Progress line: items done of the total and batches;
// before a controller counted them, the items the spec declares (a count,
// a list of files), else "-" as get's PROGRESS column says.
func progressText(st v1alpha1.TaskStatus, items v1alpha1.Items) string {
	p := st.Progress
	if p.ItemsTotal > 0 {
		return fmt.Sprintf("%d/%d items, %s", p.ItemsDone, p.ItemsTotal, governor.Count(p.BatchesDone, "batch"))
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionValid); c != nil && c.Status == metav1.ConditionFalse {
		return "- (no items: see the Valid condition)"
	}
	if n := declaredItems(items); n > 0 {
		return fmt.Sprintf("0/%d items (as the spec declares them; none run yet)", n)
	}
	return "- (items not resolved yet)"
}

// declaredItems is the number of items a spec states without resolving
// anything (a count, a list of files); 0 for a glob.
func declaredItems(items v1alpha1.Items) int64 {
	switch {
	case items.Count != nil:
		return *items.Count
	case len(items.Files) > 0:
		return int64(len(items.Files))
	}
	return 0
}

func itemsSummary(it v1alpha1.Items) string {
	switch {
	case it.Count != nil:
		return fmt.Sprintf("count %d", *it.Count)
	case len(it.Files) > 0:
		return fmt.Sprintf("%d files", len(it.Files))
	case it.Glob != "":
		return "glob " + it.Glob
	}
	return "-"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// qty prints an optional quantity of the spec as the user wrote it (512Mi),
// 0 when unset. What the controller measured or granted is printed with
// humanBytes, the one byte format of conditions, logs, get and describe.
func qty(q *resource.Quantity) string {
	if q == nil {
		return "0"
	}
	return q.String()
}

// describeLearned prints what the task's profile learned: the mode, the
// measured costs against the declared ones, the efficiency of the
// reservations and a block to paste.
func describeLearned(tw io.Writer, sp *v1alpha1.TaskSpec, st *v1alpha1.TaskStatus, e *reconcile.ProfileEstimate) {
	mode := sp.Resources.EffectiveEstimate()
	fmt.Fprintf(tw, "Costs from:\t%s estimate (profile %s)\n", mode, cell(reconcile.ProfileOf(sp)))
	if e == nil || e.Total == 0 {
		fmt.Fprintf(tw, "Measured:\tnothing yet\n")
		return
	}
	switch {
	case e.Samples > 0 && e.Note != "":
		// One batch size seen: the fit's split is not meaningful, the
		// peak at that size is (as the suggestion below says).
		fmt.Fprintf(tw, "Measured:\tpeak %s at batches of %d items, the only size seen (fixed and per-item costs cannot be told apart yet), from %s (%d killed for memory), %s\n",
			humanBytes(e.MaxPeak), e.MaxItems, governor.Count(int64(e.Samples), "batch"), e.Censored, e.State)
	default:
		fmt.Fprintf(tw, "Measured:\tfixed %s + %s per item + %s per thread (p95 residual %s), from %s (%d killed for memory), %s\n",
			humanBytes(e.FittedFixed), humanBytes(e.FittedPerItem), humanBytes(e.FittedPerThread), humanBytes(e.Residual), governor.Count(int64(e.Samples), "batch"), e.Censored, e.State)
	}
	if e.FittedPerInputByte > 0 {
		fmt.Fprintf(tw, "Input:\tmemory follows the input files' size: %.2f bytes per input byte (profile's mean %s per item); this task's items are priced by their own size\n",
			e.FittedPerInputByte, humanBytes(e.InputPerItem))
	}
	if e.Efficiency > 0 {
		fmt.Fprintf(tw, "Efficiency:\t%.0f%% of the reserved memory used at peak, on average\n", 100*e.Efficiency)
	}
	if e.OK {
		note := ""
		if e.Note != "" {
			note = " (" + e.Note + ")"
		}
		fmt.Fprintf(tw, "Suggested:\t%s%s\n", reconcile.ResourcesBlock(e.Costs), note)
	}
	if e.EfficientBatch > 0 {
		capped := e.BatchCap()
		why := fmt.Sprintf("capped at %d, the largest batch within 5%% of the least time per item", capped)
		if left := st.Progress.ItemsTotal - st.Progress.ItemsDone; left > capped {
			k := (left + capped - 1) / capped
			why += fmt.Sprintf(": the %d items left run in %d even batches of at most %d", left, k, (left+k-1)/k)
		}
		fmt.Fprintf(tw, "Batch size:\tbatches above %d items cost more time per item; %s (--batch-policy efficient, the default; largest lifts the cap)\n", e.EfficientBatch, why)
	}
}

// runningFor is how long the batch in flight lb has run by now: its time
// since it started less the time pauses stopped it.
func runningFor(lb *v1alpha1.BatchRecord, now time.Time) time.Duration {
	end := now
	if lb.PausedSince != nil {
		end = lb.PausedSince.Time
	}
	return max(0, end.Sub(lb.StartTime.Time)-time.Duration(lb.PausedSeconds)*time.Second)
}
