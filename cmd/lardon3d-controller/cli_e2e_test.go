package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// The end-to-end tests of the kubectl-like verbs and flags of issue 16.

// TestVersionPrintsModuleVersionAndCommit compares --version with what
// `go version -m` reads from the same binary.
func TestVersionPrintsModuleVersionAndCommit(t *testing.T) {
	bin := filepath.Join(binaries(t), "lardon3d-controller")
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	info := &debug.BuildInfo{}
	for _, line := range strings.Split(string(meta), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case len(f) >= 3 && f[0] == "mod":
			info.Main.Version = f[2]
		case len(f) >= 2 && f[0] == "build":
			if k, v, ok := strings.Cut(f[1], "="); ok {
				info.Settings = append(info.Settings, debug.BuildSetting{Key: k, Value: v})
			}
		}
	}
	want := "lardon3d-controller " + formatVersion(info) + "\n"
	out, code := runCLI(t, "--version")
	if code != 0 || out != want {
		t.Fatalf("--version: exit %d, output %q; want exit 0, %q", code, out, want)
	}
}

func TestFormatVersion(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		info debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{}, "(devel)"},
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}}},
			fmt.Sprintf("v1.2.3 (commit %s)", rev)},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}},
			fmt.Sprintf("(devel) (commit %s, modified)", rev)},
	} {
		if got := formatVersion(&c.info); got != c.want {
			t.Errorf("formatVersion(%+v) = %q, want %q", c.info, got, c.want)
		}
	}
}
