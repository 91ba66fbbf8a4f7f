package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// helpVerbs lists the verbs of the root --help's "Available Commands".
func helpVerbs(t *testing.T) []string {
	t.Helper()
	out, _, code := runInProcess(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	_, rest, ok := strings.Cut(out, "Available Commands:\n")
	if !ok {
		t.Fatalf("--help has no command list:\n%s", out)
	}
	var verbs []string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		if v := strings.Fields(line)[0]; v != "help" {
			verbs = append(verbs, v)
		}
	}
	sort.Strings(verbs)
	return verbs
}

// exitCodes lists the codes of lines matching re in text.
func exitCodes(re *regexp.Regexp, text string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestHelpAndREADMEListTheSameVerbsAndExitCodes keeps the README's
// command-line block and exit code table true to --help.
func TestHelpAndREADMEListTheSameVerbsAndExitCodes(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	_, block, _ := strings.Cut(readme, "## Command line\n\n```\n")
	block, _, _ = strings.Cut(block, "```")
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^lardon3d-controller ([a-z]+)`).FindAllStringSubmatch(block, -1) {
		seen[m[1]] = true
	}
	var readmeVerbs []string
	for v := range seen {
		readmeVerbs = append(readmeVerbs, v)
	}
	sort.Strings(readmeVerbs)
	if got, want := strings.Join(readmeVerbs, " "), strings.Join(helpVerbs(t), " "); got != want {
		t.Errorf("README's command line lists\n  %s\n--help lists\n  %s", got, want)
	}

	helpCode := regexp.MustCompile(`(?m)^  (\d+) +\S`)
	want := exitCodes(helpCode, exitCodesHelp)
	if len(want) < 5 {
		t.Fatalf("exit codes in the help: %v", want)
	}
	if got := exitCodes(regexp.MustCompile(`(?m)^\| (\d+) \|`), readme); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("README's exit codes %v, --help's %v", got, want)
	}
	for _, verb := range [][]string{{"--help"}, {"run", "--help"}} {
		out, _, _ := runInProcess(t, verb...)
		if got := exitCodes(helpCode, out); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%v shows exit codes %v, want %v", verb, got, want)
		}
	}
}
