package reconcile

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// IndexFile is where a running controller publishes the list index: for
// every manifest whose current version it knows, the part of the task that
// get's table reads (ListRow). get then lists ten thousand tasks without
// parsing ten thousand YAML files.
const IndexFile = "index.jsonl"

// IndexEvery bounds how often the list index is rewritten whole while
// tasks change (10,000 rows are about 1.2 MB). Between rewrites, the rows
// that changed are appended to it, at most every indexAppendEvery: a
// manifest read or written since is one get reads itself (its row names
// an older version), and during a flood the controller writes hundreds
// of statuses in 250 ms, each a manifest get would parse. A reader takes
// a file's last row.
const IndexEvery = time.Second

// indexAppendEvery bounds how often changed rows are appended to the list
// index between two rewrites: in a flood, after about every group of
// writes (flushMax), each of which takes longer; when statuses change one
// at a time, a write every few events.
const indexAppendEvery = 5 * time.Millisecond

// indexVersion is the format of IndexFile's header.
const indexVersion = 4

// indexHeader is IndexFile's first line.
type indexHeader struct {
	Version int `json:"version"`
	// PID and Start (the process's start time in clock ticks since boot,
	// /proc/PID/stat field 22) name the controller that wrote it.
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	// Spool is the spool directory the index describes.
	Spool string `json:"spool"`
}

// ListRow is what get reads of a task to list it: its table (plain and
// wide), its sort orders, its label selector and -o name. The list index
// holds one per manifest; get makes one of each manifest it parses itself
// (RowOf), so that a task lists the same whichever way it was read.
type ListRow struct {
	Name   string            // metadata.name
	Labels map[string]string // metadata.labels
	// Profile is ProfileOf the spec: the history profile get -o wide
	// looks the task's estimates up by.
	Profile string
	Phase   v1alpha1.Phase
	Gen     int64 // status.observedGeneration
	Seq     int64 // status.queueSeq
	Done    int64 // status.progress.itemsDone
	Total   int64 // status.progress.itemsTotal
	// Reservation is the contract in force; nil without one.
	Reservation *RowContract
	// LastBatch is the last batch started; nil before the first.
	LastBatch *RowBatch
	// Start is status.startTime in Unix seconds (a manifest keeps
	// seconds), nil when unset.
	Start *int64
	// Conditions are the type and reason, one pair after the other, of
	// each condition get's REASON column reads (ListedConditions) that is
	// False, in the order it reads them.
	Conditions []string
}

// RowContract is what a ListRow keeps of the contract in force.
type RowContract struct {
	Batch, BatchRequested, Threads int64
	Memory                         int64 // bytes
}

// RowBatch is what a ListRow keeps of the last batch: -1 for each part
// unknown.
type RowBatch struct {
	Index      int64
	PeakMemory int64 // bytes
	Size       int64
	Start, End int64 // Unix seconds
	// ItemsReported is how many items its command reported done
	// (LARDON3D_PROGRESS).
	ItemsReported int64
}

// Reason is the reason get's REASON column shows: the first listed False
// condition's, else "".
func (r *ListRow) Reason() string {
	if len(r.Conditions) < 2 {
		return ""
	}
	return r.Conditions[1]
}

// indexRow is one line of IndexFile after the header: the manifest's base
// name, the version of the file it describes, and its ListRow, flat. A
// line is its fields separated by tabs: the name, the version (inode,
// size, modification time), then the ListRow's fields in their order;
// strings quoted as Go literals (strconv.Quote: no raw tab or newline),
// numbers in decimal, "-" for an absent start, the contract and last batch
// as their count of numbers (0 when absent) then the numbers, the other
// lists as their length then their elements, labels sorted by key. A
// reader splits ten thousand of them in a few milliseconds.
type indexRow struct {
	File string // the manifest's base name
	// Version is the file's version the row describes.
	Version FileVersion
	ListRow
}

// appendRow appends r's line (with its newline) to b.
func appendRow(b []byte, r *indexRow) []byte {
	ints := func(b []byte, v ...int64) []byte {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		for _, x := range v {
			b = append(b, '\t')
			b = strconv.AppendInt(b, x, 10)
		}
		return b
	}
	b = strconv.AppendQuote(b, r.File)
	for _, v := range []int64{int64(r.Version.Inode), r.Version.Size, r.Version.ModTime} {
		b = append(b, '\t')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, '\t')
	b = strconv.AppendQuote(b, r.Name)
	b = append(b, '\t')
	b = strconv.AppendQuote(b, r.Profile)
	b = append(b, '\t')
	b = strconv.AppendQuote(b, string(r.Phase))
	for _, v := range []int64{r.Gen, r.Seq, r.Done, r.Total} {
		b = append(b, '\t')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, '\t')
	if c := r.Reservation; c != nil {
		b = ints(b, c.Batch, c.BatchRequested, c.Threads, c.Memory)
	} else {
		b = ints(b)
	}
	b = append(b, '\t')
	if lb := r.LastBatch; lb != nil {
		b = ints(b, lb.Index, lb.PeakMemory, lb.Size, lb.Start, lb.End, lb.ItemsReported)
	} else {
		b = ints(b)
	}
	b = append(b, '\t')
	if r.Start == nil {
		b = append(b, '-')
	} else {
		b = strconv.AppendInt(b, *r.Start, 10)
	}
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(len(r.Conditions)), 10)
	for _, c := range r.Conditions {
		b = append(b, '\t')
		b = strconv.AppendQuote(b, c)
	}
	keys := make([]string, 0, len(r.Labels))
	for k := range r.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(len(keys)), 10)
	for _, k := range keys {
		b = append(b, '\t')
		b = strconv.AppendQuote(b, k)
		b = append(b, '\t')
		b = strconv.AppendQuote(b, r.Labels[k])
	}
	return append(b, '\n')
}

// errBadRow is parseRow's error.
var errBadRow = errors.New("list index: bad row")

// parseRow parses one line of appendRow (without its newline).
func parseRow(line string) (indexRow, error) {
	var r indexRow
	pos, bad := 0, false // pos: where the next field starts, -1 past the last
	next := func() string {
		if pos < 0 {
			bad = true
			return ""
		}
		j := strings.IndexByte(line[pos:], '\t')
		if j < 0 {
			f := line[pos:]
			pos = -1
			return f
		}
		f := line[pos : pos+j]
		pos += j + 1
		return f
	}
	str := func() string {
		s, err := strconv.Unquote(next())
		bad = bad || err != nil
		return s
	}
	num := func() int64 {
		n, err := strconv.ParseInt(next(), 10, 64)
		bad = bad || err != nil
		return n
	}
	count := func() int {
		n := num()
		if n < 0 || n > int64(len(line)) { // more than the line's fields
			bad = true
			return 0
		}
		return int(n)
	}
	// ints reads a count, 0 (the part is absent) or len(dst), then as
	// many numbers into dst: the reverse of appendRow's ints.
	ints := func(dst ...*int64) bool {
		switch n := count(); n {
		case 0:
			return false
		case len(dst):
			for _, p := range dst {
				*p = num()
			}
			return true
		}
		bad = true
		return false
	}
	r.File = str()
	r.Version = FileVersion{Inode: uint64(num()), Size: num(), ModTime: num()}
	r.Name, r.Profile = str(), str()
	r.Phase = v1alpha1.Phase(str())
	r.Gen, r.Seq, r.Done, r.Total = num(), num(), num(), num()
	var c RowContract
	if ints(&c.Batch, &c.BatchRequested, &c.Threads, &c.Memory) {
		r.Reservation = &c
	}
	var lb RowBatch
	if ints(&lb.Index, &lb.PeakMemory, &lb.Size, &lb.Start, &lb.End, &lb.ItemsReported) {
		r.LastBatch = &lb
	}
	if s := next(); s != "-" {
		n, err := strconv.ParseInt(s, 10, 64)
		bad = bad || err != nil
		r.Start = &n
	}
	if n := count(); n > 0 {
		r.Conditions = make([]string, n)
		for k := range r.Conditions {
			r.Conditions[k] = str()
		}
	}
	if n := count(); n > 0 {
		r.Labels = make(map[string]string, n)
		for ; n > 0; n-- {
			k := str()
			r.Labels[k] = str()
		}
	}
	if bad || pos >= 0 || r.File == "" {
		return indexRow{}, errBadRow
	}
	return r, nil
}

// FileVersion names a version of a manifest as stat(2) (following
// symlinks) sees it: a status write-back makes a new inode, an edit in
// place changes the size or the modification time.
type FileVersion struct {
	Inode   uint64
	Size    int64
	ModTime int64 // Unix nanoseconds
}

// VersionOf is the version of the file at path (through symlinks).
func VersionOf(path string) (FileVersion, error) { return VersionAt(unix.AT_FDCWD, path) }

// VersionAt is VersionOf the file called name in the directory open as
// dirfd: a listing stats ten thousand files of one directory.
func VersionAt(dirfd int, name string) (FileVersion, error) {
	var st unix.Stat_t
	if err := spool.Fstatat(dirfd, name, &st, 0); err != nil {
		return FileVersion{}, err
	}
	return FileVersion{Inode: st.Ino, Size: st.Size, ModTime: st.Mtim.Nano()}, nil
}

// listedConditions are the condition types get's REASON column reads, in
// the order it reads them.
var listedConditions = []string{v1alpha1.ConditionValid, v1alpha1.ConditionDependenciesReady, v1alpha1.ConditionAdmitted, v1alpha1.ConditionComplete, v1alpha1.ConditionSpecApplied}

// ListedConditions are the condition types whose first False one gives
// get's REASON column, in the order get looks for them.
func ListedConditions() []string { return append([]string(nil), listedConditions...) }

// RowOf is the ListRow of t.
func RowOf(t *v1alpha1.Task) ListRow {
	st := &t.Status
	r := ListRow{Name: t.Metadata.Name, Labels: t.Metadata.Labels, Profile: ProfileOf(&t.Spec),
		Phase: st.Phase, Gen: st.ObservedGeneration, Seq: st.QueueSeq, Done: st.Progress.ItemsDone, Total: st.Progress.ItemsTotal}
	if c := st.Reservation; c != nil {
		r.Reservation = &RowContract{Batch: c.Batch, BatchRequested: c.BatchRequested, Threads: int64(c.Threads), Memory: c.Memory.Value()}
	}
	if b := st.LastBatch; b != nil {
		lb := &RowBatch{Index: b.Index, PeakMemory: -1, Size: b.Size, Start: -1, End: -1, ItemsReported: -1}
		if b.PeakMemory != nil {
			lb.PeakMemory = b.PeakMemory.Value()
		}
		if b.StartTime != nil {
			lb.Start = b.StartTime.Unix()
		}
		if b.EndTime != nil {
			lb.End = b.EndTime.Unix()
		}
		if b.ItemsReported != nil {
			lb.ItemsReported = *b.ItemsReported
		}
		r.LastBatch = lb
	}
	if st.StartTime != nil {
		s := st.StartTime.Unix()
		r.Start = &s
	}
	for _, typ := range listedConditions {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Status == metav1.ConditionFalse {
			r.Conditions = append(r.Conditions, c.Type, c.Reason)
		}
	}
	return r
}

// listIndex is the list index as the owner goroutine keeps it: one encoded
// row per manifest whose current version is known (what spool events
// reported, then what status writes left). Only the owner goroutine
// touches it, but for live, which served listings read (IndexedRow).
type listIndex struct {
	rows    map[string][]byte // base name → encoded row line
	changed bool              // rows differ from what was published
	// pending are the base names whose row was set since the last
	// publish: what the next append writes (a row dropped needs none: the
	// file's version is no row's any more).
	pending map[string]bool
	// published is the last rewrite, appended the last append.
	published, appended time.Time
	// file is the index published last, open for appending; size is its
	// length when rewritten, grown how much has been appended since.
	file        *os.File
	size, grown int
	failed      bool // the last publish failed (logged once)

	// live holds the same rows decoded, for the listings the running
	// controller serves: no index file read and parsed at each. Its
	// IndexedTasks are never changed once stored (a new row replaces
	// one). mu guards the map; the owner goroutine writes it.
	mu   sync.RWMutex
	live map[string]*IndexedTask
}

// fileSeen notes the version a spool event reports: its task (valid) or
// nothing (anything else get must read for itself).
func (x *listIndex) fileSeen(ev spool.Event) {
	if ev.OldPath != "" {
		x.drop(ev.OldPath)
	}
	switch ev.Type {
	case spool.Added, spool.Modified, spool.Renamed:
		if ev.Task != nil && ev.Err == nil {
			id := ev.Identity
			x.set(ev.Path, ev.Task, FileVersion{Inode: id.Inode, Size: id.Size, ModTime: id.ModTime.UnixNano()})
			return
		}
	}
	x.drop(ev.Path)
}

// wrote notes that path now holds task's spec (as last read) with status:
// the version is the one stat finds right after the write. (A writer that
// replaced the file in between would have its version listed with this
// status until the spool's event for it, at most a publish later.)
func (x *listIndex) wrote(path string, task *v1alpha1.Task, status *v1alpha1.TaskStatus) {
	v, err := VersionOf(path)
	if task == nil || err != nil {
		x.drop(path)
		return
	}
	t := *task
	t.Status = *status
	x.set(path, &t, v)
}

func (x *listIndex) set(path string, t *v1alpha1.Task, v FileVersion) {
	if x.rows == nil {
		x.rows = make(map[string][]byte)
	}
	base := filepath.Base(path)
	r := indexRow{File: base, Version: v, ListRow: RowOf(t)}
	x.rows[base] = appendRow(nil, &r)
	x.changed = true
	// The row is read on other goroutines: its labels are its own copy,
	// not the task's map.
	r.Labels = maps.Clone(r.Labels)
	x.mu.Lock()
	if x.live == nil {
		x.live = make(map[string]*IndexedTask)
	}
	x.live[base] = &IndexedTask{Version: v, Row: r.ListRow}
	x.mu.Unlock()
	if x.pending == nil {
		x.pending = make(map[string]bool)
	}
	x.pending[base] = true
}

func (x *listIndex) drop(path string) {
	base := filepath.Base(path)
	if _, ok := x.rows[base]; ok {
		delete(x.rows, base)
		x.changed = true
		x.mu.Lock()
		delete(x.live, base)
		x.mu.Unlock()
	}
}

// IndexedRow is the list index's row of the manifest called base, as the
// controller knows it now (what it last read or wrote of the file), for a
// listing the running controller serves. The caller must not change it. It
// is safe to call from any goroutine.
func (c *Controller) IndexedRow(base string) (*IndexedTask, bool) {
	x := &c.index
	x.mu.RLock()
	defer x.mu.RUnlock()
	r, ok := x.live[base]
	return r, ok
}

// publishIndex publishes the list index when it changed: it appends the
// rows set since the last publish to STATE/IndexFile, at most every
// indexAppendEvery, or rewrites it whole when there is none yet, when
// IndexEvery has passed since the last rewrite, or when what was appended
// outgrows a quarter of it (a reader parses every line, the rows appended
// twice included). It returns how long until it is due again (0:
// nothing waits). REQUIRES: owner goroutine.
func (c *Controller) publishIndex(now time.Time) time.Duration {
	x := &c.index
	if !x.changed {
		return 0
	}
	if x.file != nil && now.Sub(x.published) < IndexEvery && x.grown <= x.size/4 {
		if wait := x.appended.Add(indexAppendEvery).Sub(now); wait > 0 {
			return wait
		}
		var b []byte
		for base := range x.pending {
			b = append(b, x.rows[base]...) // nothing when dropped since
		}
		// One write: a reader sees a prefix of it at most, whose last
		// line it leaves when unterminated (ReadIndex).
		if _, err := x.file.Write(b); err == nil {
			x.changed, x.appended, x.grown = false, now, x.grown+len(b)
			clear(x.pending)
			return 0
		}
		// Rewritten whole instead, below.
	}
	x.closeFile()
	x.changed, x.published, x.appended = false, now, now
	clear(x.pending)
	f, size, err := writeIndex(c.cfg.StateDir, c.cfg.SpoolDir, x.rows)
	if err != nil {
		if !x.failed {
			c.log.Warn().Err(err).Msg("list index not published; get reads the manifests")
		}
		x.failed = true
		return 0
	}
	x.file, x.size, x.grown, x.failed = f, size, 0, false
	return 0
}

// closeFile closes the published index's descriptor (the file stays).
func (x *listIndex) closeFile() {
	if x.file != nil {
		_ = x.file.Close()
		x.file = nil
	}
}

// writeIndex writes the rows under a header naming this process, by a
// rename (a reader sees the old index or the new one, never a mix), and
// returns it open for appending, with its size. It is a cache: no fsync;
// a crash leaves an index naming a dead process, which readers ignore.
func writeIndex(stateDir, spoolDir string, rows map[string][]byte) (*os.File, int, error) {
	start, err := runner.StartTicks(procfs.DefaultMountPoint, os.Getpid())
	if err != nil {
		return nil, 0, err
	}
	abs, err := filepath.Abs(spoolDir)
	if err != nil {
		return nil, 0, err
	}
	head, err := json.Marshal(indexHeader{Version: indexVersion, PID: os.Getpid(), Start: start, Spool: abs})
	if err != nil {
		return nil, 0, err
	}
	path := filepath.Join(stateDir, IndexFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o640)
	if err != nil {
		return nil, 0, err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	_, _ = w.Write(head)
	_ = w.WriteByte('\n')
	size := len(head) + 1
	for _, r := range rows {
		_, _ = w.Write(r)
		size += len(r)
	}
	err = w.Flush()
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return nil, 0, err
	}
	return f, size, nil
}

// removeIndex removes the published index (at shutdown: the files are
// then the only truth).
func removeIndex(stateDir string) { _ = os.Remove(filepath.Join(stateDir, IndexFile)) }

// IndexedTask is one manifest's row of the list index.
type IndexedTask struct {
	// Version is the version of the file the row describes: a reader
	// takes the row only while VersionOf the file says the same.
	Version FileVersion
	// Row is the ListRow of the task that version holds.
	Row ListRow
}

// ReadIndex returns the rows of ReadListIndex.
func ReadIndex(stateDir, spoolDir string) (map[string]*IndexedTask, error) {
	x, err := ReadListIndex(stateDir, spoolDir)
	if err != nil {
		return nil, err
	}
	return x.Rows, nil
}

// ListIndex is the list index as a reader read it: its rows, and where it
// ended, so that the rows appended since can be read too (Appended).
type ListIndex struct {
	// Rows are, for each manifest's base name, the version of the file
	// the controller knows last (read or written, as of at most
	// indexAppendEvery and a pass of the controller ago: the file's last
	// row) and the ListRow of its task.
	Rows map[string]*IndexedTask
	path string
	ino  uint64 // the file read (a rewrite renames another in its place)
	end  int64  // its bytes read, to the end of its last whole row
}

// ReadListIndex reads the list index of the controller running on
// spoolDir with state directory stateDir. A row whose version is not the
// file's any more, and a file it leaves out (one the controller has not
// read yet, or could not take as a valid task), the caller reads. It fails
// when no controller runs (the index names a process gone), when the index
// is another spool's or unreadable.
func ReadListIndex(stateDir, spoolDir string) (*ListIndex, error) {
	path := filepath.Join(stateDir, IndexFile)
	text, ino, err := readText(path)
	if err != nil {
		return nil, err
	}
	nl := strings.IndexByte(text, '\n')
	if nl < 0 {
		return nil, errors.New("list index: no header")
	}
	var h indexHeader
	if err := json.Unmarshal([]byte(text[:nl]), &h); err != nil {
		return nil, fmt.Errorf("list index header: %w", err)
	}
	if h.Version != indexVersion {
		return nil, fmt.Errorf("list index: version %d", h.Version)
	}
	abs, err := filepath.Abs(spoolDir)
	if err != nil {
		return nil, err
	}
	if h.Spool != abs {
		return nil, fmt.Errorf("list index of spool %s, not %s", h.Spool, abs)
	}
	if start, err := runner.StartTicks(procfs.DefaultMountPoint, h.PID); err != nil || start != h.Start {
		return nil, fmt.Errorf("list index: controller %d no longer runs", h.PID)
	}
	rows, n, err := parseRows(text[nl+1:])
	if err != nil {
		return nil, err
	}
	return &ListIndex{Rows: rows, path: path, ino: ino, end: int64(nl + 1 + n)}, nil
}

// Appended returns the rows appended to the index since it was read, or
// since the last call (each file's last row): none when it has been
// rewritten since (or removed), as its rows are then a new file's. A
// listing asks for them after statting every manifest: the statuses the
// controller wrote meanwhile are there, and each such manifest is then not
// parsed by the reader.
func (x *ListIndex) Appended() (map[string]*IndexedTask, error) {
	f, err := os.Open(x.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if st.Ino != x.ino || st.Size <= x.end {
		return nil, nil
	}
	buf := make([]byte, st.Size-x.end)
	n, err := f.ReadAt(buf, x.end)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	rows, whole, err := parseRows(string(buf[:n]))
	if err != nil {
		return nil, err
	}
	x.end += int64(whole)
	return rows, nil
}

// parseRows parses the rows of body, each file's last row, and returns
// how many bytes of it they took: an append under way may have left the
// last line unterminated, and the rows before it are whole. Their strings
// are parts of body, not copies.
func parseRows(body string) (map[string]*IndexedTask, int, error) {
	body = body[:strings.LastIndexByte(body, '\n')+1]
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	// Ten thousand rows: parsed on every CPU, in chunks.
	rows := make([]IndexedTask, len(lines))
	files := make([]string, len(lines))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(lines)/512))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(lines); i += workers {
				r, err := parseRow(lines[i])
				if err != nil {
					errs[w] = err
					return
				}
				files[i], rows[i] = r.File, IndexedTask{Version: r.Version, Row: r.ListRow}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	out := make(map[string]*IndexedTask, len(lines))
	for i, f := range files {
		out[f] = &rows[i]
	}
	return out, len(body), nil
}

// readText reads the file at path as one string, read into its final
// buffer (os.ReadFile and a conversion would copy a megabyte twice), and
// returns its inode.
func readText(path string) (string, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", 0, err
	}
	var b strings.Builder
	b.Grow(int(st.Size) + 4096) // room for what is appended while read
	if _, err := io.Copy(&b, f); err != nil {
		return "", 0, err
	}
	return b.String(), st.Ino, nil
}
