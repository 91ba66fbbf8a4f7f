package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
)

// getOptions are the flags of `get`.
type getOptions struct {
	output    string
	selector  string
	sortBy    string
	noHeaders bool
	watch     bool
}

// check validates the flags and the names given (none: every task, or
// those -l selects); an error is a usage error.
func (o *getOptions) check(names []string) (labels.Selector, error) {
	switch {
	case o.output == "", o.output == "wide", o.output == "name", o.output == "json", o.output == "yaml":
	case templateOutput(o.output):
		if _, _, err := parseTemplate(o.output); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("-o %q: want wide, name, json, yaml, jsonpath=TEMPLATE, custom-columns=SPEC or custom-columns-file=FILE", o.output)
	}
	switch o.sortBy {
	case "", "queue", "name", "age", "phase":
	default:
		return nil, fmt.Errorf("--sort-by %q: want queue, name, age or phase", o.sortBy)
	}
	if len(names) == 0 && o.selector == "" {
		return labels.Everything(), nil // get alone lists every task
	}
	return (&taskArgs{selector: o.selector}).check(names)
}

func newGetCommand(g *globals) *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get [NAME... | -l SELECTOR]",
		Short: "List tasks as a table (in queue order), or print them as names, JSON, YAML, a jsonpath template or custom columns",
		Long: `List tasks as a table (in queue order), or print them as names, JSON,
YAML, a jsonpath template or custom columns, as kubectl get does. The
objects -o json, -o jsonpath and -o custom-columns print are the manifests'
tasks, status included: the task itself for a single name, else a list,
{"items": [...]} (-o jsonpath='{.items[*].metadata.name}').`,
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, err := o.check(args)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			lessGC()
			stateDir := g.stateDir()
			list := func() (listed, error) { return listTasks(g.spool, stateDir, args, sel, o) }
			l, err := list()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			p := &tablePrinter{padding: 3}
			out, err := showFiles(p, l, o, len(args) == 1, time.Now())
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			_, _ = io.WriteString(cmd.OutOrStdout(), out) // fmt would copy it whole first
			if l.served && len(args) == 0 && o.selector == "" && (o.output == "" || o.output == "wide") {
				if r, _, ok := controlBudgets(g.spool, g.stateDirFlag); ok {
					printHolds(cmd.OutOrStdout(), r.Holds) // beside the tasks, sharing their memory
				}
			}
			if !l.served && (o.output == "" || o.output == "wide") {
				warnUnserved(cmd.ErrOrStderr(), g.spool, l.files)
			}
			if !o.watch {
				return nil
			}
			return followSpool(cmd, g.spool, l, list, o, p)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, name, json, yaml, jsonpath=TEMPLATE ({.items[*].metadata.name}; {.status.phase} of get NAME), custom-columns=HEADER:.json.path,... or custom-columns-file=FILE (default: a table)")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector (k8s syntax: app=colmap,stage!=mesh,env in (a,b))")
	f.StringVar(&o.sortBy, "sort-by", "queue", "row order: queue (status.queueSeq; not yet queued last), name, age (oldest first) or phase (in lifecycle order: New, Pending, Reserved, Running, Paused, Done, Failed, Rejected, then Invalid)")
	f.BoolVar(&o.noHeaders, "no-headers", false, "print the table without its header line")
	f.BoolVarP(&o.watch, "watch", "w", false, "after listing, follow changes")
	return cmd
}

// listed is a listing: its files, in order, and what -o wide reads beside
// their rows.
type listed struct {
	files []listing.File
	// learned are the history's estimates by profile (-o wide's ETA, and
	// the PROGRESS of a batch in flight that reports nothing).
	learned map[string]*reconcile.ProfileEstimate
	// served: the controller running on the spool listed the files.
	served bool
}

// servedOutput reports whether get's output o is made from rows alone
// (the table, wide or not, and names), so that the running controller
// may list them.
func servedOutput(o *getOptions) bool {
	return !o.watch && (o.output == "" || o.output == "wide" || o.output == "name")
}

// listTasks lists the spool's tasks (or the one named in args) that o
// selects, in o's order: listed by the controller running on the spool,
// whose state directory is stateDir, when o is made from rows and it
// answers (listing.Ask), else read from the files (listing.Spool.Read).
func listTasks(dir, stateDir string, args []string, sel labels.Selector, o *getOptions) (listed, error) {
	var l listed
	if servedOutput(o) {
		// New manifests may be listed by file name where their spec is
		// not shown and selects nothing.
		q := listing.Query{Selector: o.selector, ByName: len(args) == 0 && sel.Empty() && o.output != "wide"}
		if len(args) == 1 {
			q.Name = taskArg(args[0])
		}
		l.files, l.served = listing.Ask(stateDir, dir, q)
		if l.served && len(args) > 1 {
			// Several names: picked from the whole listing; one unknown
			// and the spool is read, to say so in its own words.
			var err error
			if l.files, err = selectTasks(dir, l.files, args, sel); err != nil {
				l.served = false
			}
		}
	}
	if !l.served {
		files, err := readSpool(dir)
		if err != nil {
			return listed{}, err
		}
		if l.files, err = selectTasks(dir, files, args, sel); err != nil {
			return listed{}, err
		}
	}
	sortFiles(l.files, o.sortBy)
	if o.output == "wide" || o.output == "" && anyRunning(l.files) {
		// -o wide's ETA; the PROGRESS of a batch that reports nothing.
		l.learned = learnedEstimates(stateDir, defaultHistoryPath())
	}
	return l, nil
}

// anyRunning reports whether a task of files is Running.
func anyRunning(files []listing.File) bool {
	for _, f := range files {
		if f.Row != nil && f.Row.Phase == v1alpha1.PhaseRunning {
			return true
		}
	}
	return false
}

// learnedEstimates are the estimates by profile of the history at
// historyPath, or, while a controller holds it, those it publishes in
// stateDir; nil when there are none.
func learnedEstimates(stateDir, historyPath string) map[string]*reconcile.ProfileEstimate {
	est, err := reconcile.ReadEstimates(stateDir, historyPath)
	if err != nil || len(est) == 0 {
		return nil
	}
	learned := make(map[string]*reconcile.ProfileEstimate, len(est))
	for i := range est {
		learned[est[i].Profile] = &est[i]
	}
	return learned
}

// showFiles renders l the way o asks, escaped for a terminal; a table
// through p.
func showFiles(p *tablePrinter, l listed, o *getOptions, single bool, now time.Time) (string, error) {
	var b strings.Builder
	if err := render(&b, p, l, o.output, o.noHeaders, single, now); err != nil {
		return "", err
	}
	if o.output == "json" {
		return safeJSON(b.String()), nil
	}
	return safeText(b.String()), nil
}

// sortFiles orders files by the --sort-by key, ties in queue order, then
// by name and path: one total order, whatever order files come in. The
// keys are computed once per file (ten thousand files: some 140,000
// comparisons).
func sortFiles(files []listing.File, by string) {
	type keys struct {
		primary string // by "name"
		rank    int    // by "phase": phaseRank
		start   *int64 // by "age" (Unix seconds, Row.Age); nil: not known
		seq     int64  // queue position, math.MaxInt64 when never queued
		name    string
		i       int
	}
	ks := make([]keys, len(files))
	for i, f := range files {
		k := keys{seq: queueSeq(f), name: f.Name(), i: i}
		if k.seq == 0 {
			k.seq = math.MaxInt64 // never queued: last
		}
		switch by {
		case "name":
			k.primary = k.name
		case "phase":
			k.rank = phaseRank(f.Phase())
		case "age":
			if f.Row != nil {
				k.start = f.Row.Age()
			}
		}
		ks[i] = k
	}
	slices.SortFunc(ks, func(a, b keys) int {
		if c := strings.Compare(a.primary, b.primary); c != 0 {
			return c
		}
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		switch {
		case (a.start == nil) != (b.start == nil): // oldest first, unknown last
			if a.start == nil {
				return 1
			}
			return -1
		case a.start != nil && *a.start != *b.start:
			return cmp.Compare(*a.start, *b.start)
		}
		if c := cmp.Compare(a.seq, b.seq); c != 0 {
			return c
		}
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return strings.Compare(files[a.i].Path, files[b.i].Path)
	})
	// files[j] takes files[ks[j].i], in place: each cycle of the
	// permutation is followed once (ks[j].i = -1 when j is placed).
	for j := range ks {
		if ks[j].i < 0 {
			continue
		}
		first := files[j]
		at := j
		for ks[at].i != j {
			next := ks[at].i
			files[at], ks[at].i = files[next], -1
			at = next
		}
		files[at], ks[at].i = first, -1
	}
}

// lifecycle lists the phases get shows in the order a task lives them:
// --sort-by phase follows it.
var lifecycle = []string{
	listing.PhaseNew, string(v1alpha1.PhasePending), string(v1alpha1.PhaseReserved),
	string(v1alpha1.PhaseRunning), string(v1alpha1.PhasePaused), string(v1alpha1.PhaseDone),
	string(v1alpha1.PhaseFailed), string(v1alpha1.PhaseRejected), listing.PhaseInvalid, listing.PhaseDeleted,
}

// phaseRank is phase's place in lifecycle; a phase it does not list comes
// after every one it does.
func phaseRank(phase string) int {
	if i := slices.Index(lifecycle, phase); i >= 0 {
		return i
	}
	return len(lifecycle)
}

// queueSeq is f's position in the queue; 0 when it was never queued.
func queueSeq(f listing.File) int64 {
	if f.Row == nil {
		return 0
	}
	return f.Row.Seq
}

// watchSettle is how long get -w lets a burst of file events settle
// before listing, and how long a file must stay unparseable before it is
// shown so (a writer between truncating and writing it is not news).
const watchSettle = 150 * time.Millisecond

// followSpool prints, whenever the spool changes, only what changed, as
// kubectl get -w does: the row (or name, or object) of each task whose
// status or spec changed, a row with phase Deleted for a task gone, and
// nothing for time passing; a row through p, which printed the first
// table. It runs until the command's context ends.
func followSpool(cmd *cobra.Command, dir string, first listed, list func() (listed, error), o *getOptions, p *tablePrinter) error {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer watcher.Close()
	if err := watcher.Add(dir); err != nil {
		return err
	}
	tick := time.NewTicker(2 * time.Second) // fsnotify may drop events
	defer tick.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	seen := watchKeys(first.files, o.output, first.learned)
	suspect := map[string]string{} // unparseable versions seen once
	for {
		select {
		case <-cmd.Context().Done():
			return nil
		case _, ok := <-watcher.Events:
			if !ok {
				return nil
			}
			settle.Reset(watchSettle)
			continue
		case <-watcher.Errors:
			continue
		case <-tick.C:
		case <-settle.C:
		}
		l, err := list()
		if err != nil {
			continue
		}
		files := l.files
		keys := watchKeys(files, o.output, l.learned)
		var changed []listing.File
		for _, f := range files {
			n := f.Name()
			k := keys[n]
			if seen[n] == k {
				delete(suspect, n)
				continue
			}
			if f.Unparseable() && suspect[n] != k {
				// Maybe half-written: shown only if still so next time.
				suspect[n] = k
				keys[n] = seen[n]
				settle.Reset(watchSettle)
				continue
			}
			delete(suspect, n)
			changed = append(changed, f)
		}
		for name, k := range seen {
			if _, ok := keys[name]; !ok && k != "" {
				changed = append(changed, deletedFile(name))
			}
		}
		for name := range keys {
			if _, ok := seen[name]; !ok && keys[name] == "" {
				delete(keys, name) // a suspect never shown
			}
		}
		seen = keys
		if len(changed) == 0 {
			continue
		}
		l.files = changed
		out, err := changedRows(p, l, o)
		if err != nil {
			return err
		}
		fmt.Fprint(cmd.OutOrStdout(), out)
	}
}

// changedRows renders the changed tasks: a table's rows without its
// header, through p, which keeps every column as wide as it was printed
// above them.
func changedRows(p *tablePrinter, changed listed, o *getOptions) (string, error) {
	if o.output != "" && o.output != "wide" && !columnsOutput(o.output) {
		return showFiles(p, changed, o, true, time.Now())
	}
	noHeaders := *o
	noHeaders.noHeaders = true
	return showFiles(p, changed, &noHeaders, false, time.Now())
}

// watchKeys maps each task name to what get -w compares, never the time:
// for a table (output "" or "wide", learned the estimates by profile),
// the task's row as it would be at one fixed time, so that a status
// rewritten with nothing the row shows changed prints no row twice; else
// the task as JSON (spec and status). The file's error is added.
func watchKeys(files []listing.File, output string, learned map[string]*reconcile.ProfileEstimate) map[string]string {
	out := make(map[string]string, len(files))
	for _, f := range files {
		k := ""
		switch {
		case output == "" || output == "wide":
			k = fileRow(f, output == "wide", learned, time.Time{})
		case f.Task != nil:
			data, _ := json.Marshal(f.Task)
			k = string(data)
		}
		if f.Err != nil {
			k += "\x00" + f.Err.Error()
		}
		out[f.Name()] = k
	}
	return out
}

// deletedFile stands for a task whose manifest is gone, shown once by get -w.
func deletedFile(name string) listing.File {
	return taskFile(name+".yaml", &v1alpha1.Task{
		Metadata: v1alpha1.ObjectMeta{Name: name},
		Status:   v1alpha1.TaskStatus{Phase: listing.PhaseDeleted},
	})
}

// render prints l's files as a table (output "" or "wide", through p), as
// task/NAME lines, as JSON/YAML objects, or through a template
// (renderTemplate).
func render(w io.Writer, p *tablePrinter, l listed, output string, noHeaders, single bool, now time.Time) error {
	files := l.files
	if templateOutput(output) {
		return renderTemplate(w, p, files, output, noHeaders, single)
	}
	switch output {
	case "json", "yaml":
		return renderObjects(w, files, output, single)
	case "name":
		for _, f := range files {
			fmt.Fprintf(w, "task/%s\n", cell(f.Name()))
		}
		return nil
	}
	wide := output == "wide"
	lines := make([]string, 0, 1+len(files))
	if !noHeaders {
		header := "NAME\tPHASE\tPROGRESS\tBATCH\tMEMORY\tAGE\tREASON"
		if wide {
			header += "\tTHREADS\tGEN\tQUEUE\tETA\tLABELS"
		}
		lines = append(lines, header)
	}
	// The rows are made on every CPU (ten thousand of them), then aligned.
	rows := lines[len(lines) : len(lines)+len(files)]
	listing.OnEveryCPU(len(files), func(i int) { rows[i] = fileRow(files[i], wide, l.learned, now) })
	_, err := io.WriteString(w, p.lay(lines[:len(lines)+len(files)]))
	return err
}

// fileRow is f's line of the table (its cells tab-separated, without its
// newline), with the -o wide columns when wide (learned: the estimates by
// profile). The phase and reason are the listing's (File.Phase,
// File.Reason); a file listed by name alone, or invalid, shows nothing
// else.
func fileRow(f listing.File, wide bool, learned map[string]*reconcile.ProfileEstimate, now time.Time) string {
	progress, batch, memory, age := "-", "-", "-", "-"
	wideCells := "\t-\t-\t-\t-\t-"
	if !f.NotRead && !f.Invalid() {
		progress, batch, memory, age = statusCells(f.Row, learned[f.Row.Profile], now)
		if wide {
			wideCells = "\t" + wideColumns(f.Row, learned[f.Row.Profile], now)
		}
	}
	row := cell(f.Name()) + "\t" + cell(f.Phase()) + "\t" + progress + "\t" + batch + "\t" + memory + "\t" + age + "\t" + cell(f.Reason())
	if wide {
		row += wideCells
	}
	return row
}

// renderObjects prints the parseable tasks of files as JSON or YAML: a
// list, or the one task of `get NAME`.
func renderObjects(w io.Writer, files []listing.File, output string, single bool) error {
	var tasks []*v1alpha1.Task
	for _, f := range files {
		if f.Task != nil {
			tasks = append(tasks, f.Task)
		}
	}
	obj := listObject(tasks, single)
	if output == "json" {
		data, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	data, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// wideColumns are the columns -o wide adds: the contract's threads, the
// generation, the queue position, the ETA (reconcile.TaskETA: the profile's time per
// item and the running batch's reported pace, for a task not ended) and
// the labels.
func wideColumns(r *listing.Row, learned *reconcile.ProfileEstimate, now time.Time) string {
	threads, gen, queue, etaCol := "-", "-", "-", "-"
	if d, ok := reconcile.TaskETA(r, learned, now); ok {
		etaCol = duration.HumanDuration(d)
	}
	if c := r.Reservation; c != nil {
		threads = fmt.Sprint(c.Threads)
	}
	if r.Gen > 0 {
		gen = fmt.Sprint(r.Gen)
	}
	if r.Seq > 0 {
		queue = fmt.Sprint(r.Seq)
	}
	lbl := labels.Set(r.Labels).String()
	if lbl == "" {
		lbl = "-"
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", threads, gen, queue, etaCol, cell(lbl))
}

// printTable prints the final table of a run, in queue order as get does.
func printTable(w io.Writer, tasks []*v1alpha1.Task, now time.Time) {
	files := make([]listing.File, 0, len(tasks))
	for _, t := range tasks {
		files = append(files, taskFile("", t))
	}
	sortFiles(files, "queue") // as get lists them
	var b strings.Builder
	_ = render(&b, &tablePrinter{padding: 3}, listed{files: files}, "", false, false, now)
	fmt.Fprint(w, safeText(b.String()))
}

// statusCells are the PROGRESS, BATCH, MEMORY and AGE cells of r; learned
// is its profile's estimate (nil: none), which times a batch in flight
// that reports no progress (~45%: its time so far against the profile's).
func statusCells(r *listing.Row, learned *reconcile.ProfileEstimate, now time.Time) (progress, batch, memory, age string) {
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	progress, batch, memory, age = "-", "-", "-", "-"
	if r.Total > 0 {
		progress = itoa(r.Done) + "/" + itoa(r.Total)
		if reported, _, _, ok := reconcile.RunningReport(r, now); ok && reported > 0 {
			// Items the running batch reports done, not committed yet.
			progress += " +" + itoa(reported)
		} else if elapsed, expected, ok := reconcile.ExpectedRun(r, learned, now); ok {
			progress += " ~" + itoa(reconcile.ExpectedPercent(elapsed, expected)) + "%"
		}
	}
	if c := r.Reservation; c != nil {
		// The batch in flight (or the next, once admitted): its index
		// and the items its contract grants of those asked.
		batch = itoa(c.Batch) + "/" + itoa(c.BatchRequested)
		if lb := r.LastBatch; lb != nil && r.Phase != v1alpha1.PhaseReserved {
			index := lb.Index
			if lb.End >= 0 {
				index++ // the last one ended: the contract is the next one's
			}
			batch = "#" + itoa(index) + ":" + batch
		}
		memory = humanBytes(c.Memory)
	} else if lb := r.LastBatch; lb != nil {
		batch = "#" + itoa(lb.Index)
		if lb.PeakMemory >= 0 {
			memory = "peak " + humanBytes(lb.PeakMemory)
		}
	}
	if t := r.Age(); t != nil {
		age = duration.HumanDuration(now.Sub(time.Unix(*t, 0)))
	}
	return progress, batch, memory, age
}

// warnUnserved says, on w, that no controller serves the spool when a
// listed task still waits for one (not terminal): its phase and reason
// would otherwise stay empty, or stale, with nothing saying why.
func warnUnserved(w io.Writer, spool string, files []listing.File) {
	waiting := false
	for _, f := range files {
		if f.Row != nil && !v1alpha1.IsTerminal(f.Row.Phase) {
			waiting = true
			break
		}
	}
	if !waiting {
		return
	}
	if _, ok, err := registry.Serving(spool); ok || err != nil {
		return
	}
	fmt.Fprintln(w, noController(spool))
}
