package main

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

// maxBatchesShown bounds the batches describe lists.
const maxBatchesShown = 20

// batchRun is one attempt of one batch as the task's log tells it: the
// runner's header line, what the batch printed, and its "ended" line.
type batchRun struct {
	Index, Attempt int
	Items, Threads string
	Memory         string
	At             time.Time
	End            string // the ended line's text, "" while it runs
	from, to       int    // byte range in the log, header line included
}

var (
	batchHeaderRE = regexp.MustCompile(`^=== batch (\d+) items (\S+) threads (\d+) memory (.+?) attempt (\d+) at (\S+) ===\r?$`)
	// batchEndRE matches the line that ends an attempt: it ended, or its
	// command could not start (not found, not executable).
	batchEndRE = regexp.MustCompile(`^=== batch (\d+) (?:ended: (.*)|(could not start: .*)) ===\r?$`)
	// runnerLineRE matches every line the runner writes into the log.
	runnerLineRE = regexp.MustCompile(`^=== batch \d+[ :].* ===\r?$`)
)

// outputLinesShown is how many of a failed batch's last lines of output
// describe shows.
const outputLinesShown = 5

// parseBatchRuns splits a task log into its batch attempts, in log order.
// Text before the first header, and lines that only look like headers
// inside a batch's own output, stay in the section they fall in.
func parseBatchRuns(data []byte) []batchRun {
	var runs []batchRun
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		next := len(data)
		if end >= 0 {
			next = off + end + 1
		}
		line := string(bytes.TrimRight(data[off:next], "\n"))
		if m := batchHeaderRE.FindStringSubmatch(line); m != nil {
			if n := len(runs); n > 0 && runs[n-1].to < 0 {
				runs[n-1].to = off
			}
			r := batchRun{Items: m[2], Threads: m[3], Memory: m[4], from: off, to: -1}
			r.Index, _ = strconv.Atoi(m[1])
			r.Attempt, _ = strconv.Atoi(m[5])
			r.At, _ = time.Parse(time.RFC3339, m[6])
			runs = append(runs, r)
		} else if m := batchEndRE.FindStringSubmatch(line); m != nil {
			if n := len(runs); n > 0 && runs[n-1].to < 0 && strconv.Itoa(runs[n-1].Index) == m[1] {
				runs[n-1].End, runs[n-1].to = m[2]+m[3], next
			}
		}
		off = next
	}
	if n := len(runs); n > 0 && runs[n-1].to < 0 {
		runs[n-1].to = len(data)
	}
	return runs
}

// currentRuns keeps the runs of the task's current work: those that began
// at or after its start time (status.startTime, reset by a generation that
// starts over), to the second the log keeps.
func currentRuns(runs []batchRun, st v1alpha1.TaskStatus) []batchRun {
	if st.StartTime == nil {
		return nil
	}
	since := st.StartTime.Time.Truncate(time.Second)
	var out []batchRun
	for _, r := range runs {
		if !r.At.Before(since) {
			out = append(out, r)
		}
	}
	return out
}

// printBatches lists the batches of the task's current work, newest
// first, at most maxBatchesShown, from its log in stateDir.
func printBatches(w io.Writer, f listing.File, stateDir string) {
	if f.Task == nil {
		return
	}
	data, err := readTaskLog(stateDir, f.Name())
	if err != nil {
		return
	}
	runs := currentRuns(parseBatchRuns(data), f.Task.Status)
	if len(runs) == 0 {
		return
	}
	shown := runs
	if len(shown) > maxBatchesShown {
		shown = shown[len(shown)-maxBatchesShown:]
	}
	fmt.Fprintf(w, "Batches:       %d attempts in the log since the start", len(runs))
	if len(shown) < len(runs) {
		fmt.Fprintf(w, ", the last %d shown", len(shown))
	}
	fmt.Fprintln(w, ", newest first (logs NAME --batch N prints one)")
	st := &f.Task.Status
	for i := len(shown) - 1; i >= 0; i-- {
		r := shown[i]
		end := r.End
		if end == "" {
			// Only the batch the status says runs is running; another
			// attempt without its end line was cut short (a crash).
			end = "no end in the log (the controller stopped during it)"
			if i == len(shown)-1 && runningNow(st, int64(r.Index)) {
				end = "running"
			}
		}
		fmt.Fprintf(w, "  #%-4d items %-12s threads %-3s memory %-9s attempt %d at %s: %s\n",
			r.Index, r.Items, r.Threads, r.Memory, r.Attempt, r.At.Format("15:04:05"), cell(end))
	}
	printFailedOutput(w, data, runs, f.Name(), st)
}

// runningNow reports whether the status says batch index runs now.
func runningNow(st *v1alpha1.TaskStatus, index int64) bool {
	lb := st.LastBatch
	return lb != nil && lb.Index == index && lb.EndTime == nil && !v1alpha1.IsTerminal(st.Phase)
}

// printFailedOutput shows the last lines a failed last batch printed (its
// newest attempt in the log, the runner's own lines left out), so that
// describe says why without logs.
func printFailedOutput(w io.Writer, data []byte, runs []batchRun, name string, st *v1alpha1.TaskStatus) {
	lb := st.LastBatch
	if lb == nil || lb.EndTime == nil || (lb.Reason == "" && (lb.ExitCode == nil || *lb.ExitCode == 0)) {
		return
	}
	var run *batchRun
	for i := range runs {
		if int64(runs[i].Index) == lb.Index {
			run = &runs[i]
		}
	}
	if run == nil || strings.HasPrefix(run.End, "could not start") {
		return // nothing ran: the batch line says why
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimRight(string(data[run.from:run.to]), "\n"), "\n") {
		if !runnerLineRE.MatchString(line) {
			lines = append(lines, line)
		}
	}
	if len(lines) == 0 {
		fmt.Fprintf(w, "Output:        batch #%d attempt %d printed nothing\n", run.Index, run.Attempt)
		return
	}
	shown := lines[max(len(lines)-outputLinesShown, 0):]
	fmt.Fprintf(w, "Output:        the last %d of %d lines of batch #%d attempt %d (logs %s --batch %d prints all)\n",
		len(shown), len(lines), run.Index, run.Attempt, cell(name), run.Index)
	for _, line := range shown {
		fmt.Fprintf(w, "  %s\n", cell(strings.TrimRight(line, "\r")))
	}
}

// batchSection is what the log holds of batch index: its attempts since
// the last first attempt (the current run of it), headers included.
func batchSection(data []byte, index int) ([]byte, bool) {
	runs := parseBatchRuns(data)
	first := -1
	for i, r := range runs {
		if r.Index == index && (r.Attempt <= 1 || first < 0) {
			first = i
		}
	}
	if first < 0 {
		return nil, false
	}
	var out []byte
	for _, r := range runs[first:] {
		if r.Index == index {
			out = append(out, data[r.from:r.to]...)
		}
	}
	return out, true
}
