package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

func newEstimatesCommand(g *globals) *cobra.Command {
	var output, historyPath string
	cmd := &cobra.Command{
		Use:   "estimates [PROFILE]",
		Short: "List every profile's learned costs, sample count and a suggested resources block",
		Args:  cobra.MaximumNArgs(1),
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json (default: a table)")
	historyReadFlag(cmd, &historyPath)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		path, err := historyToRead(historyPath)
		if err != nil {
			return err
		}
		est, err := reconcile.ReadEstimates(g.stateDir(), path)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if len(args) == 1 {
			var one []reconcile.ProfileEstimate
			for _, e := range est {
				if e.Profile == args[0] {
					one = append(one, e)
				}
			}
			if len(one) == 0 {
				return &exitError{code: 1, err: fmt.Errorf("profile %q: no batch recorded", args[0])}
			}
			est = one
		}
		return printEstimates(cmd.OutOrStdout(), est, output)
	}
	return cmd
}

func printEstimates(w io.Writer, est []reconcile.ProfileEstimate, output string) error {
	if est == nil {
		est = []reconcile.ProfileEstimate{}
	}
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(estimateViews(est))
	case "yaml":
		data, err := yaml.Marshal(estimateViews(est))
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case "":
	default:
		return &exitError{code: 2, err: fmt.Errorf("-o %q: want yaml or json", output)}
	}
	if len(est) == 0 {
		fmt.Fprintln(w, "no batch recorded yet")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tSTATE\tBATCHES\tKILLED\tFIXED\tPER ITEM\tPER THREAD\tPEAK/RESERVED\tPER ITEM TIME\tBEST BATCH\tSUGGESTED")
	for _, e := range est {
		eff, sug := "-", "-"
		if e.Efficiency > 0 {
			eff = fmt.Sprintf("%.0f%%", 100*e.Efficiency)
		}
		if e.OK {
			sug = reconcile.ResourcesBlock(e.Costs)
			if e.Note != "" {
				sug += " (" + e.Note + ")"
			}
		}
		fixed, perItem, perThread := governor.FormatBytes(e.FittedFixed), governor.FormatBytes(e.FittedPerItem), governor.FormatBytes(e.FittedPerThread)
		if e.Note != "" || e.Samples == 0 {
			// One batch size seen (or none): the costs are not separable.
			fixed, perItem, perThread = "-", "-", "-"
		}
		if e.FittedPerInputByte > 0 {
			// Memory follows the input files' size.
			perItem += fmt.Sprintf(" + %.2f×input", e.FittedPerInputByte)
		}
		best := "-"
		if e.EfficientBatch > 0 {
			// Larger batches were seen to cost more per item.
			best = fmt.Sprint(e.EfficientBatch)
			if e.OK {
				sug += fmt.Sprintf(", batch: {max: %d}", e.BatchCap())
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(e.Profile), e.State, e.Samples, e.Censored,
			fixed, perItem, perThread, eff, e.DurationPerItem.Round(1e6), best, sug)
	}
	return tw.Flush()
}

// estimateView is a profile's estimate as estimates -o json|yaml prints
// it: lowerCamel names, memory measured in bytes, durations as Go
// duration strings ("1.5s") and the suggestion as a resources block of
// the manifest, in quantities rounded up (reconcile.SuggestedQuantity).
type estimateView struct {
	Profile string `json:"profile"`
	// State of the model: none, censored, slow-start or firm.
	State string `json:"state"`
	// Batches succeeded, Killed for memory, of Total recorded.
	Batches int `json:"batches"`
	Killed  int `json:"killed"`
	Total   int `json:"total"`
	// Measured is the fit, without margins.
	Measured measuredView `json:"measured"`
	// Suggested is the block to paste, when the model gives one.
	Suggested *suggestedResources `json:"suggested,omitempty"`
	// Note qualifies the suggestion.
	Note            string `json:"note,omitempty"`
	DurationFixed   string `json:"durationFixed"`
	DurationPerItem string `json:"durationPerItem"`
	// BestBatch is the batch with the least time per item, when larger
	// ones were seen to cost more per item.
	BestBatch int64 `json:"bestBatch,omitempty"`
	// Efficiency is the mean peak ÷ reserved memory.
	Efficiency float64 `json:"efficiency"`
	// LastBatch is when the newest batch ended.
	LastBatch time.Time `json:"lastBatch"`
}

// measuredView is what the model fitted, in bytes.
type measuredView struct {
	FixedBytes        int64   `json:"fixedBytes"`
	PerItemBytes      int64   `json:"perItemBytes"`
	PerThreadBytes    int64   `json:"perThreadBytes"`
	PerInputByte      float64 `json:"perInputByte,omitempty"`
	InputPerItemBytes int64   `json:"inputPerItemBytes,omitempty"`
	ResidualBytes     int64   `json:"residualBytes"`
	MaxItems          int64   `json:"maxItems"`
	MaxThreads        int     `json:"maxThreads"`
	MaxPeakBytes      int64   `json:"maxPeakBytes"`
}

// suggestedResources has the shape of spec.resources.
type suggestedResources struct {
	Fixed     memoryCost    `json:"fixed"`
	PerItem   memoryCost    `json:"perItem"`
	PerThread memoryCost    `json:"perThread"`
	Batch     *suggestedMax `json:"batch,omitempty"`
}

// memoryCost is a cost of spec.resources, memory alone.
type memoryCost struct {
	Memory string `json:"memory"`
}

// suggestedMax is spec.resources.batch, its max alone.
type suggestedMax struct {
	Max int64 `json:"max"`
}

func estimateViews(est []reconcile.ProfileEstimate) []estimateView {
	out := make([]estimateView, 0, len(est))
	for _, e := range est {
		v := estimateView{
			Profile: e.Profile, State: e.State, Batches: e.Samples, Killed: e.Censored, Total: e.Total,
			Measured: measuredView{
				FixedBytes: e.FittedFixed, PerItemBytes: e.FittedPerItem, PerThreadBytes: e.FittedPerThread,
				PerInputByte: e.FittedPerInputByte, InputPerItemBytes: e.InputPerItem, ResidualBytes: e.Residual,
				MaxItems: e.MaxItems, MaxThreads: e.MaxThreads, MaxPeakBytes: e.MaxPeak,
			},
			Note:          e.Note,
			DurationFixed: roundDuration(e.DurationFixed).String(), DurationPerItem: roundDuration(e.DurationPerItem).String(),
			BestBatch: e.EfficientBatch, Efficiency: e.Efficiency, LastBatch: e.LastBatch,
		}
		if e.OK {
			v.Suggested = &suggestedResources{
				Fixed:     memoryCost{reconcile.SuggestedQuantity(e.Costs.FixedBytes)},
				PerItem:   memoryCost{reconcile.SuggestedQuantity(e.Costs.PerItemBytes)},
				PerThread: memoryCost{reconcile.SuggestedQuantity(e.Costs.PerThreadBytes)},
			}
			if e.EfficientBatch > 0 {
				v.Suggested.Batch = &suggestedMax{Max: e.BatchCap()}
			}
		}
		out = append(out, v)
	}
	return out
}

// roundDuration keeps some four significant digits of d: to the
// millisecond from a second up, to the microsecond from a millisecond up.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}
