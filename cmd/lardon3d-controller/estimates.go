package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

func newEstimatesCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "estimates [PROFILE]",
		Short: "List every profile's learned costs, sample count and a suggested resources block",
		Args:  cobra.MaximumNArgs(1),
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json (default: a table)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		est, err := reconcile.ReadEstimates(g.stateDir(), defaultHistoryPath())
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
		return enc.Encode(est)
	case "yaml":
		data, err := yaml.Marshal(est)
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
				sug += fmt.Sprintf(", batch: {max: %d}", e.EfficientBatch)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(e.Profile), e.State, e.Samples, e.Censored,
			fixed, perItem, perThread, eff, e.DurationPerItem.Round(1e6), best, sug)
	}
	return tw.Flush()
}
