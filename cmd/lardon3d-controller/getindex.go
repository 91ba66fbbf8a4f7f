package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// indexedOutput reports whether get's output o renders from a task's
// reconcile.ListRow alone (the table, wide or not, and names), so that a
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

// unparsedNew is how many new manifests a listing from the index parses
// itself: manifests the running controller has not read yet (no row of
// the version the file is) that hold no status (spool.MayHoldStatus). Above
// it, when thousands were just dropped in, they are listed by their file
// names alone (notRead: phase New, reason NotRead), as the controller has
// not looked at them either: a parse costs some 100 µs, and ten thousand
// made the first listings of a flood take seconds. A manifest that may
// hold a status is always parsed, whatever their number.
const unparsedNew = 256

// listRows is where a listing looks up the rows of the manifests: the list
// index a running controller publishes (indexFileRows, for get on its
// own), or the controller's own rows (a listing it serves).
type listRows interface {
	// row is the row of the manifest called base, if any; it is called
	// from several goroutines at once.
	row(base string) (*reconcile.IndexedTask, bool)
	// refresh takes the rows set since the listing began: it is called
	// once, after every manifest was statted.
	refresh()
}

// indexFileRows are the rows of the list index file as a get read them,
// and those appended to it since (refresh).
type indexFileRows struct {
	x        *reconcile.ListIndex
	appended map[string]*reconcile.IndexedTask
}

func (f *indexFileRows) row(base string) (*reconcile.IndexedTask, bool) {
	if r, ok := f.appended[base]; ok {
		return r, true
	}
	r, ok := f.x.Rows[base]
	return r, ok
}

func (f *indexFileRows) refresh() {
	f.appended, _ = f.x.Appended() // none (rewritten, unreadable): all read
}

// readSpoolListed is readSpool for a listing: a manifest the running
// controller's rows describe (rows; nil: its list index, STATE/index.jsonl,
// reconcile.ReadListIndex, and the rows appended to it while the files
// were statted), in the version the file still is (reconcile.VersionAt),
// is taken from them; every other one (new, edited or written since,
// invalid, not yet read by the controller) is read and parsed as readSpool
// would, but when byName allows it and more than unparsedNew of them hold
// no status: those are listed by file name. The files come in no
// particular order. With no controller running, or no usable index, it is
// readSpool. The rows render as those of the files do (getindex_test.go
// holds it to that).
func readSpoolListed(dir string, rows listRows, byName bool) ([]manifestFile, error) {
	if rows == nil {
		x, err := reconcile.ReadListIndex(spoolStateDir(dir), dir)
		if err != nil {
			return readSpool(dir)
		}
		rows = &indexFileRows{x: x}
	}
	if err := checkSpoolDir(dir); err != nil {
		return nil, err
	}
	d, err := os.Open(dir)
	if err != nil {
		return readSpool(dir)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return readSpool(dir)
	}
	dirfd := int(d.Fd())
	rd, err := spool.OpenReader(dir, 0)
	if err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	defer rd.Close()
	// read reads a manifest no row describes: parsed, or, when byName
	// allows and it holds no status, left for the count of new ones below.
	read := func(path string) manifestFile {
		if !byName {
			return readFrom(rd, path)
		}
		data, err := rd.Read(filepath.Base(path))
		switch {
		case err != nil:
			return manifestFile{path: path, err: err}
		case !spool.MayHoldStatus(data):
			return manifestFile{path: path, raw: data} // new: parsed below, or not
		}
		return parseManifest(path, data)
	}
	paths := manifestPaths(dir, names)
	out := make([]manifestFile, len(paths))
	// A manifest whose row is of an older version than the file (its
	// status written while the rows were read, or since) waits for the
	// rows set in the meantime (refresh): in a flood, the controller
	// writes a group of statuses while ten thousand files are statted,
	// and those rows spare parsing them.
	type newer struct {
		i int
		v reconcile.FileVersion
	}
	var mu sync.Mutex
	var written []newer
	onEveryCPU(len(paths), func(i int) {
		path, base := paths[i], filepath.Base(paths[i])
		if row, ok := rows.row(base); ok {
			v, err := reconcile.VersionAt(dirfd, base)
			switch {
			case err == nil && v == row.Version:
				out[i] = manifestFile{path: path, row: &row.Row}
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
	if len(written) > 0 {
		rows.refresh()
		onEveryCPU(len(written), func(k int) {
			i, path := written[k].i, paths[written[k].i]
			if row, ok := rows.row(filepath.Base(path)); ok && row.Version == written[k].v {
				out[i] = manifestFile{path: path, row: &row.Row}
				return
			}
			out[i] = read(path)
		})
	}
	var fresh []int
	for i := range out {
		if out[i].row == nil && out[i].err == nil {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) <= unparsedNew {
		onEveryCPU(len(fresh), func(k int) {
			i := fresh[k]
			out[i] = parseManifest(out[i].path, out[i].raw)
		})
	} else {
		for _, i := range fresh {
			base := filepath.Base(out[i].path)
			out[i] = manifestFile{path: out[i].path, notRead: true, row: &reconcile.ListRow{Name: v1alpha1.NameFromFile(base)}}
		}
	}
	return out, nil // unsorted: listTasks sorts
}
