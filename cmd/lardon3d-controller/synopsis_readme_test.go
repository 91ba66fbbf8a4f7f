package main

import (
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// readmeSynopsis is the README's command-line block: each verb's lines
// (its line and the indented ones under it), and the line of the global
// flags (lardon3d-controller [--spool DIR] ... VERB).
func readmeSynopsis(t *testing.T) (verbs map[string]string, global string) {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(data), "## Command line\n\n```\n")
	block, _, _ = strings.Cut(block, "```")
	verbs = map[string]string{}
	verb := ""
	for _, line := range strings.Split(block, "\n") {
		if rest, ok := strings.CutPrefix(line, "lardon3d-controller "); ok {
			verb = ""
			if f := strings.Fields(rest); len(f) > 0 && regexp.MustCompile(`^[a-z]+$`).MatchString(f[0]) {
				verb = f[0]
			} else if strings.HasPrefix(rest, "[") {
				global += line
				continue
			}
		}
		if verb != "" {
			verbs[verb] += line + "\n"
		}
	}
	return verbs, global
}

// longFlags lists the --flags written in text, once each, sorted.
func longFlags(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?:^|[\s\[|(])--([a-z][a-z0-9-]*)`).FindAllStringSubmatch(text, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	sort.Strings(out)
	return out
}

// TestREADMESynopsisIsRunHelp keeps the README's command-line block true
// to what each verb's --help lists: every flag of a verb in its lines
// (the budget flags of run may be named as such), no flag the verb does
// not take, the global flags once on their own line and not as one
// verb's, and --spool, which has a default ($LARDON3D_SPOOL, else .),
// never shown as required.
func TestREADMESynopsisIsRunHelp(t *testing.T) {
	verbs, global := readmeSynopsis(t)
	root := newRootCommand(io.Discard, io.Discard)
	var globals []string
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) { globals = append(globals, f.Name) })
	sort.Strings(globals)
	if got := longFlags(global); !slices.Equal(got, globals) {
		t.Errorf("README's line of global flags has %v, the root command %v:\n%s", got, globals, global)
	}
	if regexp.MustCompile(`(^|[^\[])--spool DIR`).MatchString(global) {
		t.Errorf("--spool shown as required: %s", global)
	}
	budget := map[string]bool{}
	for _, c := range root.Commands() {
		if c.Name() == "budgets" {
			c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) { budget[f.Name] = f.Name != "output" && f.Name != "help" })
		}
	}
	for _, c := range root.Commands() {
		name := c.Name()
		if name == "help" || name == "completion" || name == "node" { // node's flags are its build's (-tags lardon3d_node)
			continue
		}
		lines, ok := verbs[name]
		if !ok {
			t.Errorf("README's command line has no %s", name)
			continue
		}
		written := longFlags(lines)
		folded := strings.Contains(lines, "[the budget flags of run]")
		var missing []string
		own := map[string]bool{}
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			own[f.Name] = true
			short := f.Shorthand != "" && regexp.MustCompile(`[\s\[|]-`+f.Shorthand+`\b`).MatchString(lines)
			if !slices.Contains(written, f.Name) && !short && !(folded && budget[f.Name]) {
				missing = append(missing, f.Name)
			}
		})
		if len(missing) > 0 {
			t.Errorf("README's %s lacks --%s (its --help lists them)", name, strings.Join(missing, ", --"))
		}
		for _, w := range written {
			switch {
			case own[w]:
			case slices.Contains(globals, w):
				t.Errorf("README shows the global --%s as %s's", w, name)
			default:
				t.Errorf("README's %s shows --%s, which %s --help does not list", name, w, name)
			}
		}
		if regexp.MustCompile(`(^|[^\[])--spool DIR`).MatchString(lines) {
			t.Errorf("README's %s shows --spool as required:\n%s", name, lines)
		}
		checkShorthands(t, c, lines)
	}
}

// checkShorthands: a flag's shorthand written in the verb's lines (-o,
// -l, -w, -f) is one the verb takes.
func checkShorthands(t *testing.T, c *cobra.Command, lines string) {
	t.Helper()
	for _, m := range regexp.MustCompile(`[\s\[|]-([a-zA-Z])\b`).FindAllStringSubmatch(lines, -1) {
		if c.Flags().ShorthandLookup(m[1]) == nil {
			t.Errorf("README's %s shows -%s, which %s does not take", c.Name(), m[1], c.Name())
		}
	}
}
