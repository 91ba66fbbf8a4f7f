package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// manifestFile is one manifest of the spool as the read-only verbs see it.
type manifestFile struct {
	path string
	task *v1alpha1.Task // nil when not parseable, or not parsed
	// row is what get lists of the task: RowOf the task when parsed, or
	// the running controller's list index row, or, for a manifest listed
	// by its file name alone (notRead), that name; nil when not parseable.
	row *reconcile.ListRow
	err error // parse or validation error
	// learned is what the history says of the task's profile (get -o
	// wide fills it; nil when unknown).
	learned *reconcile.ProfileEstimate
	// notRead marks a manifest listed by its file name alone: the
	// running controller has not read it yet, it holds no status, and the
	// listing did not parse it (readSpoolListed, when many are new). row
	// then holds only the name NameFromFile gives.
	notRead bool
	// raw is the file's content, read and not parsed yet (row and err
	// both nil): readSpoolListed's first pass.
	raw []byte
}

// readSpool reads every manifest of dir, sorted by task name. It works
// whether or not a controller runs: status is what the controller last wrote.
func readSpool(dir string) ([]manifestFile, error) {
	if err := checkSpoolDir(dir); err != nil {
		return nil, err
	}
	names, err := listDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	rd, err := spool.OpenReader(dir, 0)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	defer rd.Close()
	out := readManifests(manifestPaths(dir, names), func(path string) manifestFile { return readFrom(rd, path) })
	sortByName(out)
	return out, nil
}

// sortByName orders manifests by task name, then by path (two files may
// name the same task).
func sortByName(out []manifestFile) {
	sort.Slice(out, func(i, j int) bool {
		if a, b := out[i].name(), out[j].name(); a != b {
			return a < b
		}
		return out[i].path < out[j].path
	})
}

// listDir lists the names in dir unsorted (os.ReadDir sorts by file name
// and makes an entry of each; the callers sort by task name).
func listDir(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// manifestPaths are the paths of the manifests among the names in dir,
// as filepath.Join makes them (one string each: ten thousand in a
// listing).
func manifestPaths(dir string, names []string) []string {
	prefix := filepath.Clean(dir)
	switch {
	case dir == "" || prefix == ".":
		prefix = ""
	case !strings.HasSuffix(prefix, string(filepath.Separator)): // the root ends in one
		prefix += string(filepath.Separator)
	}
	paths := make([]string, 0, len(names))
	for _, name := range names {
		if spool.IsManifestName(name) {
			paths = append(paths, prefix+name)
		}
	}
	return paths
}

// readManifests reads the manifests at paths with read, on every CPU (a
// listing of ten thousand files is that many parses), in their order.
func readManifests(paths []string, read func(string) manifestFile) []manifestFile {
	out := make([]manifestFile, len(paths))
	onEveryCPU(len(paths), func(i int) { out[i] = read(paths[i]) })
	return out
}

// onEveryCPU calls f(0), ..., f(n-1), as many at a time as there are CPUs.
func onEveryCPU(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

// checkSpoolDir fails unless dir is a directory (through symlinks): a
// verb pointed at no spool says so instead of printing an empty listing.
func checkSpoolDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("spool %s: no such directory (--spool or LARDON3D_SPOOL)", dir)
	case err != nil:
		return fmt.Errorf("spool %s: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("spool %s: not a directory (--spool or LARDON3D_SPOOL)", dir)
	}
	return nil
}

// readManifest reads one manifest through the spool's checked path: what
// the controller would refuse to read (a FIFO, a socket, a file too large,
// outside the spool or another user's) is never opened, only reported.
func readManifest(path string) manifestFile {
	rd, err := spool.OpenReader(filepath.Dir(path), 0)
	if err != nil {
		return manifestFile{path: path, err: err}
	}
	defer rd.Close()
	return readFrom(rd, path)
}

// readFrom is readManifest through rd, the spool directory of path opened
// once for a whole listing.
func readFrom(rd *spool.Reader, path string) manifestFile {
	data, err := rd.Read(filepath.Base(path))
	if err != nil {
		return manifestFile{path: path, err: err}
	}
	return parseManifest(path, data)
}

// parseManifest is the manifest at path, whose content is data.
func parseManifest(path string, data []byte) manifestFile {
	task, err := v1alpha1.ParseManifest(filepath.Base(path), data)
	mf := taskFile(path, task)
	mf.err = err
	return mf
}

// taskFile is the manifest at path holding task (nil: not parseable).
func taskFile(path string, task *v1alpha1.Task) manifestFile {
	mf := manifestFile{path: path, task: task}
	if task != nil {
		r := reconcile.RowOf(task)
		mf.row = &r
	}
	return mf
}

func (m manifestFile) name() string {
	if m.row != nil && m.row.Name != "" {
		return m.row.Name
	}
	return v1alpha1.NameFromFile(filepath.Base(m.path))
}

// unparseable reports whether the file is not YAML at all (or was not
// read).
func (m manifestFile) unparseable() bool {
	if m.row == nil {
		return true
	}
	var se *v1alpha1.SyntaxError
	return m.err != nil && errors.As(m.err, &se)
}

// invalid reports whether the file is not a task the controller runs and
// says so nowhere in the file: unparseable, not read, or refused with no
// status written (a status the controller could write says Rejected).
func (m manifestFile) invalid() bool {
	return m.unparseable() || (m.err != nil && m.row.Phase == "")
}

// taskArg is the task name a command-line argument names: NAME, or
// task/NAME as `get -o name` prints it.
func taskArg(arg string) string { return strings.TrimPrefix(arg, "task/") }

// findTask finds the manifest of the task called name (see taskArg).
func findTask(dir, name string) (manifestFile, error) {
	name = taskArg(name)
	files, err := readSpool(dir)
	if err != nil {
		return manifestFile{}, err
	}
	for _, f := range files {
		if f.name() == name {
			return f, nil
		}
	}
	return manifestFile{}, unknownTaskError(dir, name, files)
}
