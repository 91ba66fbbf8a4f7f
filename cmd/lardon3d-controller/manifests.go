package main

import (
	"os"
	"runtime/debug"
	"strings"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// spoolAt is the spool at dir as the verbs read it: each task's row names
// the history profile the controller would give it.
func spoolAt(dir string) listing.Spool {
	return listing.Spool{Dir: dir, Profile: reconcile.ProfileOf}
}

// readSpool reads and parses every manifest of dir, sorted by task name.
// It works whether or not a controller runs: a status is what the
// controller last wrote.
func readSpool(dir string) ([]listing.File, error) { return spoolAt(dir).Read() }

// readManifest reads and parses the manifest at path through the spool's
// checked read path.
func readManifest(path string) listing.File { return spoolAt("").ReadFile(path) }

// taskFile is the manifest at path holding task (nil: not parseable).
func taskFile(path string, task *v1alpha1.Task) listing.File { return spoolAt("").TaskFile(path, task) }

// taskArg is the task name a command-line argument names: NAME, or
// task/NAME as `get -o name` prints it.
func taskArg(arg string) string { return strings.TrimPrefix(arg, "task/") }

// findTask finds the manifest of the task called name (see taskArg).
func findTask(dir, name string) (listing.File, error) {
	name = taskArg(name)
	files, err := readSpool(dir)
	if err != nil {
		return listing.File{}, err
	}
	if one := listing.SelectName(files, name); len(one) == 1 {
		return one[0], nil
	}
	return listing.File{}, unknownTaskError(dir, name, files)
}

// lessGC leaves the collector off until the heap nears 256 MiB, unless
// GOGC or GOMEMLIMIT say otherwise: a listing is one short burst of
// allocation that the process ends (ten thousand tasks: some 50 MB), and
// the default collector took a sixth of get's time.
func lessGC() {
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(256 << 20)
		debug.SetGCPercent(-1)
	}
}
