package listing

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
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// File is one manifest of a spool as a listing sees it.
type File struct {
	Path string
	// Task is the task the file holds; nil when not parseable, or not
	// parsed (its row came from a controller's rows, or it is NotRead).
	Task *v1alpha1.Task
	// Row is what get lists of the task: RowOf the task when parsed, the
	// running controller's row, or, for a manifest listed by its file
	// name alone (NotRead), that name; nil when not parseable.
	Row *Row
	// Err is why the file is not a valid task: not readable, not
	// parseable, or refused (with a Row: what could be decoded).
	Err error
	// NotRead marks a manifest listed by its file name alone: the running
	// controller has not read it yet, it holds no status, and the listing
	// did not parse it (ReadListed, when many are new).
	NotRead bool
	// raw is the file's content, read and not parsed yet (Row and Err
	// both nil): ReadListed's first pass.
	raw []byte
}

// Name is the task's name: metadata.name, else the one the file name
// gives.
func (f File) Name() string {
	if f.Row != nil && f.Row.Name != "" {
		return f.Row.Name
	}
	return v1alpha1.NameFromFile(filepath.Base(f.Path))
}

// Unparseable reports whether the file is not YAML at all (or was not
// read).
func (f File) Unparseable() bool {
	if f.Row == nil {
		return true
	}
	var se *v1alpha1.SyntaxError
	return f.Err != nil && errors.As(f.Err, &se)
}

// Invalid reports whether the file is not a task the controller runs and
// says so nowhere in the file: unparseable, not read, or refused with no
// status written (a status the controller could write says Rejected).
func (f File) Invalid() bool {
	return f.Unparseable() || (f.Err != nil && f.Row.Phase == "")
}

// The phases and reasons a listing shows beside a task's own.
const (
	// PhaseNew is the phase of a task no controller has written a status
	// into yet.
	PhaseNew = "New"
	// PhaseInvalid is the phase of a file that is not a task (Invalid).
	PhaseInvalid = "Invalid"
	// PhaseDeleted is the phase get -w shows once for a task whose
	// manifest is gone.
	PhaseDeleted = "Deleted"
	// ReasonNotRead is the reason of a manifest listed by its file name
	// alone (NotRead).
	ReasonNotRead = "NotRead"
)

// Phase is the phase a listing shows for f: Invalid, its status's phase,
// or New.
func (f File) Phase() string {
	switch {
	case f.Invalid():
		return PhaseInvalid
	case f.Row.Phase != "":
		return string(f.Row.Phase)
	}
	return PhaseNew
}

// Reason is the reason a listing shows for f: NotRead, why it is Invalid
// (on one line, cut at 80 characters), or its row's Reason.
func (f File) Reason() string {
	switch {
	case f.NotRead:
		return ReasonNotRead
	case f.Invalid():
		return oneLine(f.Err)
	}
	return f.Row.Reason()
}

// oneLine is err's message on one line, cut at 80 characters.
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:77]) + "..."
	}
	return s
}

// Spool is a spool directory as a listing reads it.
type Spool struct {
	Dir string
	// Profile names the history profile of a task's spec
	// (reconcile.ProfileOf), kept in its Row.
	Profile func(*v1alpha1.TaskSpec) string
}

// TaskFile is the manifest at path holding task (nil: not parseable).
func (s Spool) TaskFile(path string, task *v1alpha1.Task) File {
	f := File{Path: path, Task: task}
	if task != nil {
		r := RowOf(task, s.Profile(&task.Spec))
		f.Row = &r
	}
	return f
}

// Parse is the manifest at path, whose content is data.
func (s Spool) Parse(path string, data []byte) File {
	task, err := v1alpha1.ParseManifest(filepath.Base(path), data)
	f := s.TaskFile(path, task)
	f.Err = err
	return f
}

// ReadFile reads one manifest through the spool's checked path: what the
// controller would refuse to read (a FIFO, a socket, a file too large,
// outside the spool or another user's) is never opened, only reported.
func (s Spool) ReadFile(path string) File {
	rd, err := spool.OpenReader(filepath.Dir(path), 0)
	if err != nil {
		return File{Path: path, Err: err}
	}
	defer rd.Close()
	return s.readFrom(rd, path)
}

// readFrom is ReadFile through rd, the spool directory of path opened
// once for a whole listing.
//
// A file replaced between its stat and its open (spool.ErrChanged: the
// controller's status write-back exchanged it) is read again, a few
// times: a verb never fails for a write the controller made meanwhile.
func (s Spool) readFrom(rd *spool.Reader, path string) File {
	data, err := rd.Read(filepath.Base(path))
	for try := 1; errors.Is(err, spool.ErrChanged) && try < readTries; try++ {
		data, err = rd.Read(filepath.Base(path))
	}
	if err != nil {
		return File{Path: path, Err: err}
	}
	return s.Parse(path, data)
}

// readTries bounds the reads of a manifest that keeps changing while it
// is opened.
const readTries = 5

// Read reads and parses every manifest of the spool, sorted by task name
// (then path). It works whether or not a controller runs: a status is
// what the controller last wrote.
func (s Spool) Read() ([]File, error) {
	if err := CheckDir(s.Dir); err != nil {
		return nil, err
	}
	d, err := os.Open(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", s.Dir, err)
	}
	defer d.Close()
	// Unsorted: os.ReadDir would sort by file name and make an entry of
	// each; the order is the task names'.
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", s.Dir, err)
	}
	rd, err := spool.OpenReader(s.Dir, 0)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", s.Dir, err)
	}
	defer rd.Close()
	paths := ManifestPaths(s.Dir, names)
	out := make([]File, len(paths))
	OnEveryCPU(len(paths), func(i int) { out[i] = s.readFrom(rd, paths[i]) })
	SortByName(out)
	return out, nil
}

// SortByName orders files by task name, then by path (two files may name
// the same task).
func SortByName(files []File) {
	sort.Slice(files, func(i, j int) bool {
		if a, b := files[i].Name(), files[j].Name(); a != b {
			return a < b
		}
		return files[i].Path < files[j].Path
	})
}

// ManifestPaths are the paths of the manifests among the names in dir,
// as filepath.Join makes them (one string each: ten thousand in a
// listing).
func ManifestPaths(dir string, names []string) []string {
	prefix := pathPrefix(dir)
	paths := make([]string, 0, len(names))
	for _, name := range names {
		if spool.IsManifestName(name) {
			paths = append(paths, prefix+name)
		}
	}
	return paths
}

// pathPrefix is what a name in dir is prefixed with to make its path, as
// filepath.Join(dir, name) makes it.
func pathPrefix(dir string) string {
	prefix := filepath.Clean(dir)
	switch {
	case dir == "" || prefix == ".":
		return ""
	case !strings.HasSuffix(prefix, string(filepath.Separator)): // the root ends in one
		return prefix + string(filepath.Separator)
	}
	return prefix
}

// OnEveryCPU calls f(0), ..., f(n-1), as many at a time as there are
// CPUs: a listing of ten thousand files is that many stats, parses and
// rows.
func OnEveryCPU(n int, f func(i int)) {
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

// CheckDir fails unless dir is a directory (through symlinks): a verb
// pointed at no spool says so instead of printing an empty listing.
func CheckDir(dir string) error {
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

// UnparsedNew is how many new manifests ReadListed parses itself:
// manifests the running controller has not read yet (no row of the
// version the file is) that hold no status (spool.MayHoldStatus). Above
// it, when thousands were just dropped in, they are listed by their file
// names alone (NotRead: phase New, reason NotRead), as the controller has
// not looked at them either: a parse costs some 100 µs, and ten thousand
// made the first listings of a flood take seconds. A manifest that may
// hold a status is always parsed, whatever their number.
const UnparsedNew = 256

// ReadListed reads the spool for a listing: a manifest the running
// controller's rows describe, in the version the file still is
// (VersionAt), is taken from them; every other one (new, edited or
// written since, invalid, not yet read by the controller) is read and
// parsed as Read would, but when byName allows it and more than
// UnparsedNew of them hold no status: those are listed by file name. The
// files come in no particular order. With no rows (nil), it is Read. The
// files list as those of Read do (the tests hold it to that).
func (s Spool) ReadListed(rows Rows, byName bool) ([]File, error) {
	if rows == nil {
		return s.Read()
	}
	if err := CheckDir(s.Dir); err != nil {
		return nil, err
	}
	d, err := os.Open(s.Dir)
	if err != nil {
		return s.Read()
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return s.Read()
	}
	dirfd := int(d.Fd())
	rd, err := spool.OpenReader(s.Dir, 0)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", s.Dir, err)
	}
	defer rd.Close()
	// read reads a manifest no row describes: parsed, or, when byName
	// allows and it holds no status, left for the count of new ones below.
	read := func(path string) File {
		if !byName {
			return s.readFrom(rd, path)
		}
		data, err := rd.Read(filepath.Base(path))
		switch {
		case err != nil:
			return File{Path: path, Err: err}
		case !spool.MayHoldStatus(data):
			return File{Path: path, raw: data} // new: parsed below, or not
		}
		return s.Parse(path, data)
	}
	paths := ManifestPaths(s.Dir, names)
	out := make([]File, len(paths))
	// A manifest whose row is of an older version than the file (its
	// status written while the files were statted, or since) is looked up
	// again once every file was: in a flood, the controller writes a group
	// of statuses while ten thousand files are statted, and the rows it
	// set meanwhile spare parsing them.
	type newer struct {
		i int
		v FileVersion
	}
	var mu sync.Mutex
	var written []newer
	OnEveryCPU(len(paths), func(i int) {
		path, base := paths[i], filepath.Base(paths[i])
		if row, ok := rows.IndexedRow(base); ok {
			v, err := VersionAt(dirfd, base)
			switch {
			case err == nil && v == row.Version:
				out[i] = File{Path: path, Row: &row.Row}
				return
			case err == nil:
				mu.Lock()
				written = append(written, newer{i, v})
				mu.Unlock()
				return
			}
		}
		out[i] = read(path)
	})
	OnEveryCPU(len(written), func(k int) {
		i, path := written[k].i, paths[written[k].i]
		if row, ok := rows.IndexedRow(filepath.Base(path)); ok && row.Version == written[k].v {
			out[i] = File{Path: path, Row: &row.Row}
			return
		}
		out[i] = read(path)
	})
	var fresh []int
	for i := range out {
		if out[i].Row == nil && out[i].Err == nil {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) <= UnparsedNew {
		OnEveryCPU(len(fresh), func(k int) {
			i := fresh[k]
			out[i] = s.Parse(out[i].Path, out[i].raw)
		})
	} else {
		for _, i := range fresh {
			base := filepath.Base(out[i].Path)
			out[i] = File{Path: out[i].Path, NotRead: true, Row: &Row{Name: v1alpha1.NameFromFile(base)}}
		}
	}
	return out, nil // unsorted: the caller sorts
}
