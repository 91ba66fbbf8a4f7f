package webview

import (
	"cmp"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

//go:embed assets
var assets embed.FS

// Source is what the view shows: the running host.
type Source interface {
	Machine
	Tasks() []reconcile.TaskView
	FinishedBatches(limit int) []reconcile.BatchRow
	Estimate(profile string) reconcile.ProfileEstimate
	Records(profile string) []history.Record
}

// Limits of what one answer carries.
const (
	// BatchesMax bounds the timeline's finished batches: the newest.
	BatchesMax = reconcile.PublishedBatchesMax
	// LogTailBytes is how much of a task's log its page shows: the end.
	LogTailBytes = 32 << 10
	// TasksMax is how many tasks /api/tasks answers without ?limit=:
	// the graph of ten thousand tasks is their counts by phase and the
	// tasks not ended first.
	TasksMax = 500
)

// View serves the web view of a running controller: its pages, their
// scripts, and the JSON they read (the same for scripts: /api/...). It
// only answers GET and HEAD.
type View struct {
	src Source
	rec *Recorder
	mux *http.ServeMux
	now func() time.Time
}

// New is the view of src, whose machine series rec records.
func New(src Source, rec *Recorder) *View {
	v := &View{src: src, rec: rec, mux: http.NewServeMux(), now: time.Now}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	page := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		http.ServeFileFS(w, r, static, "index.html")
	}
	v.mux.HandleFunc("/{$}", page)
	v.mux.HandleFunc("/timeline", page)
	v.mux.HandleFunc("/graph", page)
	v.mux.HandleFunc("/task/{name...}", page)
	v.mux.Handle("/static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	v.mux.HandleFunc("/api/machine", v.machine)
	v.mux.HandleFunc("/api/batches", v.batches)
	v.mux.HandleFunc("/api/tasks", v.tasks)
	v.mux.HandleFunc("/api/tasks/{name...}", v.task)
	return v
}

// ServeHTTP answers GET and HEAD of the view's paths, from a host that is
// the machine itself (DNS rebinding: a page of another site that renamed
// its host to 127.0.0.1 gets nothing), to a request whose listener said
// who asks (WithViewer): they see the tasks, logs and names of their own
// spools only, unless they see all (root, the admin group).
func (v *View) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the web view is read-only", http.StatusMethodNotAllowed)
		return
	}
	if !CheckHost(w, r) {
		return
	}
	if _, ok := viewerOf(r); !ok {
		http.Error(w, "who asks is unknown: open the view with `lardon3d-controller view`", http.StatusForbidden)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	v.mux.ServeHTTP(w, r)
}

// CheckHost answers 403 to a request whose Host does not name this
// machine (allowedHost), and reports whether it did not: every path a
// controller serves over HTTP (metrics too) checks it.
func CheckHost(w http.ResponseWriter, r *http.Request) bool {
	if allowedHost(r.Host) {
		return true
	}
	http.Error(w, "unknown host: open the view by IP address or localhost", http.StatusForbidden)
	return false
}

// scopeOf is what r's viewer sees (ServeHTTP made sure there is one).
func scopeOf(r *http.Request) *scope {
	vw, _ := viewerOf(r)
	return newScope(vw)
}

// allowedHost reports whether a request's Host names this machine the
// way a user opens the view: an IP address, localhost, or the machine's
// host name exactly (not a longer name that starts with it: any domain
// can name a host of its own so and point it at 127.0.0.1).
func allowedHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	name, err := os.Hostname()
	return err == nil && strings.EqualFold(host, name)
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// MachineAnswer is /api/machine's answer.
type MachineAnswer struct {
	// Now is the server's time and Interval the sampling pace (seconds);
	// Window how far back the series go (seconds).
	Now      int64 `json:"now"`
	Interval int64 `json:"interval"`
	Window   int64 `json:"window"`
	// Points after ?since= (Unix seconds), oldest first.
	Points []Point `json:"points"`
}

// machine answers the machine's series after ?since= (Unix seconds; all
// of them without).
func (v *View) machine(w http.ResponseWriter, r *http.Request) {
	since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	points := v.rec.Since(since)
	if s := scopeOf(r); !s.v.All {
		points = othersMerged(points, s)
	}
	writeJSON(w, MachineAnswer{Now: v.now().Unix(), Interval: int64(v.rec.Interval() / time.Second),
		Window: int64(v.rec.Window() / time.Second), Points: points})
}

// Outcomes of a batch on the timeline.
const (
	OutcomeRunning   = "Running"
	OutcomeSucceeded = "Succeeded"
	OutcomeMemory    = "MemoryExceeded"
	OutcomeFailed    = "Failed"
	// OutcomeEvicted: the batch yielded its memory to programs outside
	// the batches (not a failure; its items ran again).
	OutcomeEvicted = "Evicted"
)

// BatchView is one batch of the timeline.
type BatchView struct {
	Task    string `json:"task"`
	Profile string `json:"profile,omitempty"`
	// Generation, Batch (from 0) and Attempt (from 1; a retry above 1).
	Generation int64 `json:"generation"`
	Batch      int64 `json:"batch"`
	Attempt    int   `json:"attempt"`
	// Start and End in Unix seconds (End 0 while it runs).
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	// Items and Threads it ran with; ReservedBytes its contract's memory;
	// PeakBytes its peak need (while it runs: its memory now).
	Items         int64 `json:"items"`
	Threads       int   `json:"threads"`
	ReservedBytes int64 `json:"reservedBytes"`
	PeakBytes     int64 `json:"peakBytes"`
	// Outcome: Running, Succeeded, MemoryExceeded, Evicted or Failed; ExitCode and
	// Reason say more.
	Outcome  string `json:"outcome"`
	ExitCode int    `json:"exitCode"`
	Reason   string `json:"reason,omitempty"`
}

// outcomeOf is how a finished batch ended, for the timeline.
func outcomeOf(b *reconcile.BatchRow) string {
	switch {
	case b.KilledForMemory || b.Reason == v1alpha1.ReasonMemoryExceeded || b.Reason == v1alpha1.ReasonGPUMemoryExceeded:
		// A GPU memory kill is drawn as a memory kill; its reason says which.
		return OutcomeMemory
	case b.Reason == v1alpha1.ReasonEvicted:
		return OutcomeEvicted
	case b.ExitCode == 0 && b.Reason == "":
		return OutcomeSucceeded
	default:
		return OutcomeFailed
	}
}

// unixSeconds is t in Unix seconds, with its fraction.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// batchViews are the finished batches of the history (of task only,
// unless ""), then the running ones, those s sees. The history names a
// task without its spool: a task of a second spool (spool/name) is matched
// by its name, and a finished batch is shown to a user who does not see
// every spool when a task of theirs has its name and profile (never a
// name they do not know).
func (v *View) batchViews(task string, s *scope) []BatchView {
	out := []BatchView{}
	plain := task[strings.LastIndexByte(task, '/')+1:]
	var mine map[[2]string]bool // nil: every batch
	if !s.v.All {
		mine = map[[2]string]bool{}
		for _, tv := range v.src.Tasks() {
			if s.sees(tv.Spool) {
				mine[[2]string{tv.Row.Name, tv.Row.Profile}] = true
			}
		}
	}
	for _, b := range v.src.FinishedBatches(BatchesMax) {
		if task != "" && b.Task != plain || mine != nil && !mine[[2]string{b.Task, b.Profile}] {
			continue
		}
		out = append(out, BatchView{Task: b.Task, Profile: b.Profile, Generation: b.Generation, Batch: b.Batch, Attempt: b.Attempt,
			Start: unixSeconds(b.Start), End: unixSeconds(b.End), Items: b.Items, Threads: b.Threads,
			ReservedBytes: b.ReservedBytes, PeakBytes: b.PeakBytes, Outcome: outcomeOf(&b), ExitCode: b.ExitCode, Reason: b.Reason})
	}
	name := taskNamer(v.src.SpoolDirs())
	for _, b := range v.src.RunningBatches() {
		n := name(b.Spool, b.Task)
		if task != "" && n != task || !s.sees(b.Spool) {
			continue
		}
		out = append(out, BatchView{Task: n, Generation: b.Generation, Batch: b.Index, Attempt: b.Attempt,
			Start: unixSeconds(b.Started), Items: b.Size, Threads: b.Contract.Threads,
			ReservedBytes: b.Contract.MemoryBytes, PeakBytes: b.MemoryBytes, Outcome: OutcomeRunning, ExitCode: -1})
	}
	return out
}

// BatchesAnswer is /api/batches' answer.
type BatchesAnswer struct {
	Now     int64       `json:"now"`
	Batches []BatchView `json:"batches"`
}

// batches answers the timeline: every batch the history keeps (the
// newest BatchesMax), then the running ones; ?task= only one task's.
func (v *View) batches(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, BatchesAnswer{Now: v.now().Unix(), Batches: v.batchViews(r.URL.Query().Get("task"), scopeOf(r))})
}

// TaskSummary is one task of the graph.
type TaskSummary struct {
	Name  string `json:"name"`
	Spool string `json:"spool"`
	File  string `json:"file"`
	// Phase as get shows it, and the reason of its first False condition.
	Phase  string `json:"phase"`
	Reason string `json:"reason,omitempty"`
	// Done and Total items.
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// ETASeconds is when it should be done, from now (-1: unknown or
	// ended).
	ETASeconds int64    `json:"etaSeconds"`
	DependsOn  []string `json:"dependsOn,omitempty"`
	Profile    string   `json:"profile,omitempty"`
	// seq is its place in the queue (status.queueSeq).
	seq int64
}

// summaries are the host's tasks s sees; the estimates of their profiles
// are read once each.
func (v *View) summaries(s *scope) []TaskSummary {
	views := v.src.Tasks()
	name := taskNamer(v.src.SpoolDirs())
	learned := make(map[string]*reconcile.ProfileEstimate)
	now := v.now()
	out := make([]TaskSummary, 0, len(views))
	for i := range views {
		if s.sees(views[i].Spool) {
			out = append(out, v.summaryOf(&views[i], name(views[i].Spool, views[i].Row.Name), learned, now))
		}
	}
	return out
}

// summaryOf is the summary of tv, called name, at now; learned holds the
// estimates of the profiles read so far.
func (v *View) summaryOf(tv *reconcile.TaskView, name string, learned map[string]*reconcile.ProfileEstimate, now time.Time) TaskSummary {
	r := &tv.Row
	f := listing.File{Path: tv.File, Row: r}
	s := TaskSummary{Name: name, Spool: tv.Spool, File: tv.File, Phase: f.Phase(),
		Reason: f.Reason(), Done: r.Done, Total: r.Total, ETASeconds: -1, DependsOn: tv.DependsOn, Profile: r.Profile, seq: r.Seq}
	if v1alpha1.IsTerminal(r.Phase) {
		return s
	}
	e, ok := learned[r.Profile]
	if !ok {
		est := v.src.Estimate(r.Profile)
		e = &est
		learned[r.Profile] = e
	}
	if d, ok := reconcile.TaskETA(r, e, now); ok {
		s.ETASeconds = int64(d.Round(time.Second) / time.Second)
	}
	return s
}

// TasksAnswer is /api/tasks' answer.
type TasksAnswer struct {
	Now int64 `json:"now"`
	// Total is how many tasks the spools hold, Phases how many are in
	// each phase.
	Total  int            `json:"total"`
	Phases map[string]int `json:"phases"`
	// Tasks are at most ?limit= of them (TasksMax without; 0: all): the
	// tasks not ended, in arrival order, then the ended ones, the most
	// recently queued first.
	Tasks []TaskSummary `json:"tasks"`
}

// tasks answers the tasks with their dependencies, phase, progress and
// ETA (?limit=, TasksMax without).
func (v *View) tasks(w http.ResponseWriter, r *http.Request) {
	limit := TasksMax
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			http.Error(w, "limit: want a number of tasks (0: all)", http.StatusBadRequest)
			return
		}
		limit = n
	}
	all := v.summaries(scopeOf(r))
	ans := TasksAnswer{Now: v.now().Unix(), Total: len(all), Phases: map[string]int{}}
	for i := range all {
		ans.Phases[all[i].Phase]++
	}
	slices.SortStableFunc(all, func(a, b TaskSummary) int {
		ae, be := v1alpha1.IsTerminal(v1alpha1.Phase(a.Phase)), v1alpha1.IsTerminal(v1alpha1.Phase(b.Phase))
		switch {
		case ae != be && ae:
			return 1
		case ae != be:
			return -1
		case ae:
			return cmp.Compare(b.seq, a.seq)
		default:
			return cmp.Compare(a.seq, b.seq)
		}
	})
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	ans.Tasks = all
	writeJSON(w, ans)
}

// Condition is one condition of a task's status.
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
}

// Sample is one finished batch of a profile, for the scatter of peak
// against batch size.
type Sample struct {
	Items     int64 `json:"items"`
	Threads   int   `json:"threads"`
	PeakBytes int64 `json:"peakBytes"`
	// Killed: stopped for memory (its need was above its reservation,
	// ReservedBytes).
	Killed        bool  `json:"killed,omitempty"`
	ReservedBytes int64 `json:"reservedBytes,omitempty"`
	// OK: a measure the model fits (exit 0).
	OK bool `json:"ok"`
}

// TaskAnswer is /api/tasks/NAME's answer.
type TaskAnswer struct {
	Now  int64       `json:"now"`
	Task TaskSummary `json:"task"`
	// Conditions of its manifest's status, as last written.
	Conditions []Condition `json:"conditions"`
	// Batches of the task the history keeps, then the running one.
	Batches []BatchView `json:"batches"`
	// LogFile and the end of the log (at most LogTailBytes).
	LogFile string `json:"logFile,omitempty"`
	Log     string `json:"log"`
	// Estimate is what the history learned of its profile; Samples the
	// profile's batches it learned from.
	Estimate reconcile.ProfileEstimate `json:"estimate"`
	Samples  []Sample                  `json:"samples"`
}

// task answers one task's page: its conditions, its batches, its log's
// end, its learned estimate and the measures behind it.
func (v *View) task(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var found *TaskSummary
	var logFile string
	views, namer, sc := v.src.Tasks(), taskNamer(v.src.SpoolDirs()), scopeOf(r)
	for i := range views {
		// Another user's task is not found: as if it did not exist.
		if namer(views[i].Spool, views[i].Row.Name) == name && sc.sees(views[i].Spool) {
			s := v.summaryOf(&views[i], name, map[string]*reconcile.ProfileEstimate{}, v.now())
			found = &s
			// Where the controller keeps the log, never the manifest's
			// status.logFile: its writer could name any file root reads.
			logFile = reconcile.TaskLogPath(views[i].StateDir, views[i].Row.Name)
			break
		}
	}
	if found == nil {
		http.Error(w, "no task "+strconv.Quote(name)+" in the served spools", http.StatusNotFound)
		return
	}
	ans := TaskAnswer{Now: v.now().Unix(), Task: *found, Batches: v.batchViews(name, sc), Conditions: []Condition{}, Samples: []Sample{}}
	f := listing.Spool{Dir: found.Spool, Profile: reconcile.ProfileOf}.ReadFile(filepath.Join(found.Spool, found.File))
	if f.Task != nil {
		for _, c := range f.Task.Status.Conditions {
			ans.Conditions = append(ans.Conditions, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason,
				Message: c.Message, Since: c.LastTransitionTime.Time})
		}
		if logFile != "" {
			ans.LogFile = logFile
			ans.Log = tailOf(logFile, LogTailBytes)
		}
	}
	if found.Profile != "" {
		ans.Estimate = v.src.Estimate(found.Profile)
		for _, rec := range v.src.Records(found.Profile) {
			ans.Samples = append(ans.Samples, Sample{Items: rec.Items, Threads: rec.Threads, PeakBytes: rec.Need(),
				Killed: rec.KilledForMemory, ReservedBytes: rec.LimitBytes, OK: rec.Succeeded()})
		}
	}
	writeJSON(w, ans)
}

// tailOf is the last n bytes of the regular file at path, from a line's
// start; "" when it cannot be read. A FIFO, a device or a link put in the
// log's place is never opened for reading.
func tailOf(path string, n int64) string {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return ""
	}
	off := max(0, st.Size()-n)
	data, err := io.ReadAll(io.NewSectionReader(f, off, n))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	if off > 0 {
		if i := strings.IndexByte(string(data), '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return strings.ToValidUTF8(string(data), "\uFFFD")
}

var _ Source = (*reconcile.Host)(nil)
