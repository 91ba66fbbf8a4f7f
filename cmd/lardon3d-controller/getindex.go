package main

import (
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// indexedOutput reports whether get's output o renders from a task's
// reconcile.ListView alone (the table, wide or not, and names), so that a
// running controller's list index can stand for the manifests.
func indexedOutput(o *getOptions) bool {
	return !o.watch && (o.output == "" || o.output == "wide" || o.output == "name")
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

// readSpoolListed is readSpool for a listing: a manifest the running
// controller's list index (STATE/index.jsonl, reconcile.ReadIndex)
// describes, in the version the file still is (reconcile.VersionOf), is
// taken from it; every other one (new, edited or written since, invalid,
// not yet read by the controller) is read and parsed as readSpool would. With no
// controller running, or no usable index, it is readSpool. The rows
// render as those of the files do (getindex_test.go holds it to that).
func readSpoolListed(dir string) ([]manifestFile, error) {
	idx, err := reconcile.ReadIndex(filepath.Join(dir, ".lardon3d"), dir)
	if err != nil {
		return readSpool(dir)
	}
	if err := checkSpoolDir(dir); err != nil {
		return nil, err
	}
	ents, err := listDir(dir)
	if err != nil {
		return readSpool(dir)
	}
	out := readManifests(manifestPaths(dir, ents), func(path string) manifestFile {
		if row, ok := idx[filepath.Base(path)]; ok {
			if v, err := reconcile.VersionOf(path); err == nil && v == row.Version {
				return manifestFile{path: path, task: row.Task}
			}
		}
		return readManifest(path)
	})
	sortByName(out)
	return out, nil
}
