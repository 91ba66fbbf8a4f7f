package main

import (
	"fmt"
	"runtime/debug"
)

// buildRevision and buildModified are the git revision a build was made
// from and "true" when its tree was dirty, stamped by make build
// (-ldflags -X) for the builds whose BuildInfo holds no vcs.revision: Go
// records none with -buildvcs=false, nor in a git worktree, whose .git is
// a file. Empty otherwise.
var buildRevision, buildModified string

// versionString is the module version of the binary, with the VCS
// revision it was built from when the build recorded one (and
// ", modified" for a build from a dirty tree).
func versionString() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = &debug.BuildInfo{}
	}
	return formatVersion(withStampedRevision(info, buildRevision, buildModified))
}

// withStampedRevision is info with the revision that make build stamped
// (rev, modified "true" or not) when info records none.
func withStampedRevision(info *debug.BuildInfo, rev, modified string) *debug.BuildInfo {
	if rev == "" {
		return info
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return info
		}
	}
	out := *info
	out.Settings = append(append([]debug.BuildSetting(nil), info.Settings...),
		debug.BuildSetting{Key: "vcs.revision", Value: rev},
		debug.BuildSetting{Key: "vcs.modified", Value: fmt.Sprint(modified == "true")})
	return &out
}

// formatVersion is the module version of info ("(devel)" for a build
// from a checkout) followed by the revision it records, if any.
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
