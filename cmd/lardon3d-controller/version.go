package main

import (
	"fmt"
	"runtime/debug"
)

// versionString is the module version of the binary, with the VCS
// revision it was built from when the build recorded one (and
// ", modified" for a build from a dirty tree).
func versionString() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return formatVersion(info)
}

func formatVersion(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if modified {
		return fmt.Sprintf("%s (commit %s, modified)", v, rev)
	}
	return fmt.Sprintf("%s (commit %s)", v, rev)
}
