package reconcile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// IndexFile is where a running controller publishes the list index: for
// every manifest whose current version it knows, the part of the task that
// get's table reads (ListView). get then lists ten thousand tasks without
// parsing ten thousand YAML files.
const IndexFile = "index.jsonl"

// IndexEvery bounds how often the list index is rewritten while tasks
// change: a listing is at most this much (plus a pass of Run) behind the
// files.
const IndexEvery = 250 * time.Millisecond

// indexVersion is the format of IndexFile's header.
const indexVersion = 1

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

// indexRow is one line of IndexFile after the header.
type indexRow struct {
	// File is the manifest's base name.
	File string `json:"file"`
	// Task is ListView of the task its current version holds.
	Task *v1alpha1.Task `json:"task"`
}

// listedConditions are the condition types get's REASON column reads, in
// the order it reads them.
var listedConditions = []string{v1alpha1.ConditionValid, v1alpha1.ConditionDependenciesReady, v1alpha1.ConditionAdmitted, v1alpha1.ConditionComplete, v1alpha1.ConditionSpecApplied}

// ListedConditions are the condition types whose first False one gives
// get's REASON column, in the order get looks for them.
func ListedConditions() []string { return append([]string(nil), listedConditions...) }

// ListView is the part of t that get's table (plain and wide), its sort
// orders, its label selector and -o name read: the name and labels, what
// names the task's profile (class, command, resources.profile), the whole
// status but its conditions, and of the conditions only the first of each
// type get looks at, when False, with its type, status and reason. get
// renders a ListView exactly as it renders t (a test holds it to that).
func ListView(t *v1alpha1.Task) *v1alpha1.Task {
	v := &v1alpha1.Task{APIVersion: t.APIVersion, Kind: t.Kind}
	v.Metadata.Name = t.Metadata.Name
	v.Metadata.Labels = t.Metadata.Labels
	v.Spec.Class = t.Spec.Class
	v.Spec.Command = t.Spec.Command
	v.Spec.Resources.Profile = t.Spec.Resources.Profile
	v.Status = t.Status
	v.Status.Conditions = nil
	for _, typ := range listedConditions {
		if c := meta.FindStatusCondition(t.Status.Conditions, typ); c != nil && c.Status == "False" {
			v.Status.Conditions = append(v.Status.Conditions, metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason})
		}
	}
	return v
}

// listIndex is the list index as the owner goroutine keeps it: one encoded
// row per manifest whose current version is known (what spool events
// reported, then what status writes left). Only the owner goroutine
// touches it.
type listIndex struct {
	rows      map[string][]byte // base name → encoded row line
	changed   bool
	published time.Time
	failed    bool // the last publish failed (logged once)
}

// fileSeen notes the version a spool event reports: its task (valid) or
// nothing (anything else get must read for itself).
func (x *listIndex) fileSeen(ev spool.Event) {
	if x.rows == nil {
		x.rows = make(map[string][]byte)
	}
	if ev.OldPath != "" {
		x.drop(ev.OldPath)
	}
	switch ev.Type {
	case spool.Added, spool.Modified, spool.Renamed:
		if ev.Task != nil && ev.Err == nil {
			x.set(ev.Path, ev.Task)
			return
		}
	}
	x.drop(ev.Path)
}

// wrote notes that path now holds task's spec (as last read) with status.
func (x *listIndex) wrote(path string, task *v1alpha1.Task, status *v1alpha1.TaskStatus) {
	if task == nil {
		return
	}
	t := *task
	t.Status = *status
	x.set(path, &t)
}

func (x *listIndex) set(path string, t *v1alpha1.Task) {
	if x.rows == nil {
		x.rows = make(map[string][]byte)
	}
	line, err := json.Marshal(indexRow{File: filepath.Base(path), Task: ListView(t)})
	if err != nil {
		x.drop(path)
		return
	}
	x.rows[filepath.Base(path)] = append(line, '\n')
	x.changed = true
}

func (x *listIndex) drop(path string) {
	if _, ok := x.rows[filepath.Base(path)]; ok {
		delete(x.rows, filepath.Base(path))
		x.changed = true
	}
}

// publishIndex rewrites STATE/IndexFile when the index changed and
// IndexEvery has passed since the last time; it returns how long until it
// is due again (0: nothing waits). REQUIRES: owner goroutine.
func (c *Controller) publishIndex(now time.Time) time.Duration {
	x := &c.index
	if !x.changed {
		return 0
	}
	if wait := x.published.Add(IndexEvery).Sub(now); wait > 0 {
		return wait
	}
	x.changed, x.published = false, now
	if err := writeIndex(c.cfg.StateDir, c.cfg.SpoolDir, x.rows); err != nil {
		if !x.failed {
			c.log.Warn().Err(err).Msg("list index not published; get reads the manifests")
		}
		x.failed = true
		return 0
	}
	x.failed = false
	return 0
}

// writeIndex writes the rows under a header naming this process, by a
// rename (a reader sees the old index or the new one, never a mix). It is
// a cache: no fsync; a crash leaves an index naming a dead process, which
// readers ignore.
func writeIndex(stateDir, spoolDir string, rows map[string][]byte) error {
	start, err := procStart(os.Getpid())
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(spoolDir)
	if err != nil {
		return err
	}
	head, err := json.Marshal(indexHeader{Version: indexVersion, PID: os.Getpid(), Start: start, Spool: abs})
	if err != nil {
		return err
	}
	n := len(head) + 1
	for _, r := range rows {
		n += len(r)
	}
	buf := make([]byte, 0, n)
	buf = append(append(buf, head...), '\n')
	for _, r := range rows {
		buf = append(buf, r...)
	}
	path := filepath.Join(stateDir, IndexFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeIndex removes the published index (at shutdown: the files are
// then the only truth).
func removeIndex(stateDir string) { _ = os.Remove(filepath.Join(stateDir, IndexFile)) }

// ReadIndex returns the list index of the controller running on spoolDir
// with state directory stateDir: for each manifest's base name, ListView
// of the task its current version holds (as of at most IndexEvery and a
// pass of the controller ago). A file it leaves out is one the controller
// has not read yet, or could not take as a valid task: the caller reads
// it. It fails when no controller runs (the index names a process gone),
// when the index is another spool's or unreadable.
func ReadIndex(stateDir, spoolDir string) (map[string]*v1alpha1.Task, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, IndexFile))
	if err != nil {
		return nil, err
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, errors.New("list index: no header")
	}
	var h indexHeader
	if err := json.Unmarshal(data[:nl], &h); err != nil {
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
	if start, err := procStart(h.PID); err != nil || start != h.Start {
		return nil, fmt.Errorf("list index: controller %d no longer runs", h.PID)
	}
	out := make(map[string]*v1alpha1.Task)
	sc := bufio.NewScanner(bytes.NewReader(data[nl+1:]))
	sc.Buffer(nil, len(data))
	for sc.Scan() {
		var r indexRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Task == nil {
			return nil, fmt.Errorf("list index: bad row: %v", err)
		}
		out[r.File] = r.Task
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// procStart is process pid's start time in clock ticks since boot.
func procStart(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields counted are those after its last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(f[19], 10, 64) // field 22
}
