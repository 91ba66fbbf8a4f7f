package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// taskVerbs are the verbs whose arguments are task names, and how many.
var taskVerbs = map[string]int{
	"logs": 1, "top": 1,
	"get": -1, "describe": -1, "pause": -1, "resume": -1, "delete": -1, "retry": -1, "restart": -1, "wait": -1, "batches": -1, // any number
}

// outputValues are the -o values each verb takes.
var outputValues = map[string][]string{
	"get":     {"wide", "name", "json", "yaml"},
	"budgets": {"json", "yaml"},
	"shares":  {"json", "yaml"},
	"batches": {"tsv", "json"},
}

// addCompletion completes task names (from the spool of --spool) for the
// verbs that take them, and the values of -o; cobra's own `completion`
// verb writes the shell scripts.
func addCompletion(root *cobra.Command, g *globals) {
	for _, c := range root.Commands() {
		if max, ok := taskVerbs[c.Name()]; ok && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = completeTaskNames(g, max)
		}
		if vals, ok := outputValues[c.Name()]; ok {
			vals := vals
			_ = c.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return vals, cobra.ShellCompDirectiveNoFileComp
			})
		}
	}
}

// completeTaskNames completes the names of the spool's tasks not already
// on the command line; max bounds the arguments (-1: any number).
func completeTaskNames(g *globals, max int) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if max >= 0 && len(args) >= max {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		files, err := readSpool(g.spool)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		given := map[string]bool{}
		for _, a := range args {
			given[taskArg(a)] = true
		}
		var out []cobra.Completion
		for _, f := range files {
			n := f.Name()
			if given[n] || !strings.HasPrefix(n, toComplete) {
				continue
			}
			out = append(out, cobra.CompletionWithDesc(n, f.Phase()))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
