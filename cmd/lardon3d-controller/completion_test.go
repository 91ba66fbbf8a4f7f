package main

import (
	"strings"
	"testing"
)

func TestCompletionOffersTaskNamesAndOutputFormats(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "features.yaml", strings.ReplaceAll(validManifest, "%NAME%", "features"))
	writeManifest(t, spool, "fetch.yaml", strings.ReplaceAll(validManifest, "%NAME%", "fetch"))
	writeManifest(t, spool, "mesh.yaml", strings.ReplaceAll(validManifest, "%NAME%", "mesh"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"describe", "f"}, "features\tNew\nfetch\tNew\n:4\n"},
		{[]string{"logs", "mesh", ""}, ":4\n"},                              // one name only
		{[]string{"pause", "mesh", ""}, "features\tNew\nfetch\tNew\n:4\n"},  // several
		{[]string{"delete", "mesh", ""}, "features\tNew\nfetch\tNew\n:4\n"}, // not twice
		{[]string{"retry", "task/features", "fe"}, "fetch\tNew\n:4\n"},
		{[]string{"get", "-o", ""}, "wide\nname\njson\nyaml\n:4\n"},
		{[]string{"budgets", "-o", ""}, "json\nyaml\n:4\n"},
	} {
		out, _, code := runInProcess(t, append([]string{"__complete", "--spool", spool}, tc.args...)...)
		if code != 0 || out != tc.want {
			t.Errorf("__complete %v: exit %d\n%q\nwant\n%q", tc.args, code, out, tc.want)
		}
	}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if out, _, code := runInProcess(t, "completion", shell); code != 0 || !strings.Contains(out, "lardon3d-controller") {
			t.Errorf("completion %s: exit %d", shell, code)
		}
	}
}
