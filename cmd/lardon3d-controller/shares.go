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
	"github.com/lardon3d/lardon3d-controller/pkg/metrics"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// sharesFresh is how old the published standings may be: the controller
// writes them every 2 s.
const sharesFresh = 10 * time.Second

func newSharesCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "shares",
		Short: "Show each account's fair share: shares, decayed usage, memory reserved, running and pending tasks (as sshare)",
		Long: `Show each account with work on the controller serving the spool (a
spool's owner, or the account its configuration names): its shares and
their fraction among the accounts with work, its usage of reserved memory
× time decayed with the configured half-life and that usage's fraction,
the memory its tasks hold now, and its running and pending tasks. Among
tasks of one priority, the next asked is the one whose account used the
least of its share.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: a table)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ps, err := reconcile.ReadShares(g.stateDir())
		if err != nil || time.Since(ps.WrittenAt) > sharesFresh {
			return &exitError{code: 1, err: fmt.Errorf("no controller is running on %s: the shares are the running controller's (lardon3d-controller run --spool %s)", g.spool, g.spool)}
		}
		return printShares(cmd.OutOrStdout(), ps, output)
	}
	return cmd
}

// printShares writes the standings as a table, JSON or YAML.
func printShares(w io.Writer, ps reconcile.PublishedShares, output string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(ps)
	case "yaml":
		data, err := yaml.Marshal(ps)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	case "":
	default:
		return &exitError{code: 2, err: fmt.Errorf("--output %q: want json or yaml", output)}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tSHARES\tSHARE\tUSAGE\tUSED\tMEMORY\tRUNNING\tPENDING")
	for _, a := range ps.Accounts {
		name := a.Account
		if name == ps.SpoolAccount {
			name += " *"
		}
		fmt.Fprintf(tw, "%s\t%g\t%.2f\t%s·s\t%.2f\t%s\t%d\t%d\n", cell(name), a.Shares, a.ShareFraction,
			governor.FormatBytes(int64(a.Usage)), a.UsageFraction, governor.FormatBytes(a.MemoryBytes), a.Running, a.Pending)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "usage: reserved memory × time, half-life %s; SHARE and USED are fractions among the accounts with work; * this spool's account\n", ps.HalfLife)
	return err
}

// accountSamples are the standings as metrics reads them.
func accountSamples(ps reconcile.PublishedShares) []metrics.AccountSample {
	out := make([]metrics.AccountSample, 0, len(ps.Accounts))
	for _, a := range ps.Accounts {
		out = append(out, metrics.AccountSample{Account: a.Account, Usage: a.Usage, UsageFraction: a.UsageFraction,
			ShareFraction: a.ShareFraction, MemoryBytes: a.MemoryBytes, Running: a.Running, Pending: a.Pending})
	}
	return out
}

// shareLine says the fair share of the account of the spool whose state
// directory is stateDir, with the numbers, as the running controller
// published it; "" when it did not (lately).
func shareLine(stateDir string) string {
	ps, err := reconcile.ReadShares(stateDir)
	if err != nil || time.Since(ps.WrittenAt) > sharesFresh {
		return ""
	}
	for _, a := range ps.Accounts {
		if a.Account == ps.SpoolAccount {
			return fmt.Sprintf("%s's share: %.2f of %.2f used (%d running, %d pending; %d accounts with work, usage half-life %s)",
				a.Account, a.UsageFraction, a.ShareFraction, a.Running, a.Pending, len(ps.Accounts), ps.HalfLife)
		}
	}
	return ""
}
