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

// check validates the flags; an error is a usage error.
func (o *getOptions) check() (labels.Selector, error) {
	switch o.output {
	case "", "wide", "name", "json", "yaml":
	default:
		return nil, fmt.Errorf("-o %q: want wide, name, json or yaml", o.output)
	}
	switch o.sortBy {
	case "", "queue", "name", "age", "phase":
	default:
		return nil, fmt.Errorf("--sort-by %q: want queue, name, age or phase", o.sortBy)
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return nil, fmt.Errorf("-l %q: %w", o.selector, err)
	}
	return sel, nil
}

func newGetCommand(g *globals) *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:   "get [NAME]",
		Short: "List tasks as a table (in queue order), or print them as names, JSON or YAML",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, err := o.check()
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if indexedOutput(o) && listedByController(g.spool, args, o, cmd.OutOrStdout()) {
				return nil
			}
			lessGC()
			list := func() ([]manifestFile, error) { return listTasks(g.spool, nil, args, sel, o) }
			files, err := list()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			out, err := showFiles(files, o, len(args) == 1, time.Now())
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			_, _ = io.WriteString(cmd.OutOrStdout(), out) // fmt would copy it whole first
			if o.output == "" || o.output == "wide" {
				warnUnserved(cmd.ErrOrStderr(), g.spool, files)
			}
			if !o.watch {
				return nil
			}
			return followSpool(cmd, g.spool, files, list, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, name, json or yaml (default: a table)")
	f.StringVarP(&o.selector, "selector", "l", "", "label selector (k8s syntax: app=colmap,stage!=mesh,env in (a,b))")
	f.StringVar(&o.sortBy, "sort-by", "queue", "row order: queue (status.queueSeq; not yet queued last), name, age (oldest first) or phase")
	f.BoolVar(&o.noHeaders, "no-headers", false, "print the table without its header line")
	f.BoolVarP(&o.watch, "watch", "w", false, "after listing, follow changes")
	return cmd
}

// listTasks lists the spool's tasks (or the one named in args) that o
// selects, in o's order; a listing from the index takes the rows from rows
// (nil: the list index file, readSpoolListed).
func listTasks(dir string, rows listRows, args []string, sel labels.Selector, o *getOptions) ([]manifestFile, error) {
	var files []manifestFile
	var err error
	if indexedOutput(o) {
		// New manifests may be listed by file name where their spec is
		// not shown and selects nothing.
		files, err = readSpoolListed(dir, rows, len(args) == 0 && sel.Empty() && o.output != "wide")
	} else {
		files, err = readSpool(dir)
	}
	if err != nil {
		return nil, err
	}
	if len(args) == 1 {
		name := taskArg(args[0])
		one := selectName(files, name)
		if len(one) == 0 {
			return nil, unknownTaskError(dir, name, files)
		}
		files = one
	}
	files = selectLabels(files, sel)
	sortFiles(files, o.sortBy)
	if o.output == "wide" {
		if est, err := reconcile.ReadEstimates(spoolStateDir(dir), defaultHistoryPath()); err == nil && len(est) > 0 {
			byProfile := make(map[string]*reconcile.ProfileEstimate, len(est))
			for i := range est {
				byProfile[est[i].Profile] = &est[i]
			}
			for i := range files {
				if r := files[i].row; r != nil {
					files[i].learned = byProfile[r.Profile]
				}
			}
		}
	}
	return files, nil
}

// showFiles renders files the way o asks, escaped for a terminal.
func showFiles(files []manifestFile, o *getOptions, single bool, now time.Time) (string, error) {
	var b strings.Builder
	if err := render(&b, files, o.output, o.noHeaders, single, now); err != nil {
		return "", err
	}
	if o.output == "json" {
		return safeJSON(b.String()), nil
	}
	return safeText(b.String()), nil
}

// selectLabels keeps the files whose task's labels match sel (a file that
// is not parseable has no labels).
func selectLabels(files []manifestFile, sel labels.Selector) []manifestFile {
	if sel.Empty() {
		return files
	}
	var out []manifestFile
	for _, f := range files {
		var set labels.Set
		if f.row != nil {
			set = f.row.Labels
		}
		if sel.Matches(set) {
			out = append(out, f)
		}
	}
	return out
}

// sortFiles orders files by the --sort-by key, ties in queue order, then
// by name and path: one total order, whatever order files come in. The
// keys are computed once per file (ten thousand files: some 140,000
// comparisons).
func sortFiles(files []manifestFile, by string) {
	type keys struct {
		primary string // name or phase (by "name", "phase")
		start   *int64 // by "age" (Unix seconds); nil: never started
		seq     int64  // queue position, math.MaxInt64 when never queued
		name    string
		i       int
	}
	ks := make([]keys, len(files))
	for i, f := range files {
		k := keys{seq: queueSeq(f), name: f.name(), i: i}
		if k.seq == 0 {
			k.seq = math.MaxInt64 // never queued: last
		}
		switch by {
		case "name":
			k.primary = k.name
		case "phase":
			k.primary = phaseName(f)
		case "age":
			if f.row != nil {
				k.start = f.row.Start
			}
		}
		ks[i] = k
	}
	slices.SortFunc(ks, func(a, b keys) int {
		if c := strings.Compare(a.primary, b.primary); c != 0 {
			return c
		}
		switch {
		case (a.start == nil) != (b.start == nil): // oldest first, never started last
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
		return strings.Compare(files[a.i].path, files[b.i].path)
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

// queueSeq is f's position in the queue; 0 when it was never queued.
func queueSeq(f manifestFile) int64 {
	if f.row == nil {
		return 0
	}
	return f.row.Seq
}

// watchSettle is how long get -w lets a burst of file events settle
// before listing, and how long a file must stay unparseable before it is
// shown so (a writer between truncating and writing it is not news).
const watchSettle = 150 * time.Millisecond

// followSpool prints, whenever the spool changes, only what changed, as
// kubectl get -w does: the row (or name, or object) of each task whose
// status or spec changed, a row with phase Deleted for a task gone, and
// nothing for time passing. It runs until the command's context ends.
func followSpool(cmd *cobra.Command, dir string, last []manifestFile, list func() ([]manifestFile, error), o *getOptions) error {
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
	seen := watchKeys(last)
	suspect := map[string]string{} // unparseable versions seen once
	shown := map[string]manifestFile{}
	for _, f := range last {
		shown[f.name()] = f
	}
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
		files, err := list()
		if err != nil {
			continue
		}
		keys := watchKeys(files)
		var changed []manifestFile
		for _, f := range files {
			n := f.name()
			k := keys[n]
			if seen[n] == k {
				delete(suspect, n)
				continue
			}
			if f.unparseable() && suspect[n] != k {
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
		out, err := changedRows(files, changed, shown, o)
		if err != nil {
			return err
		}
		fmt.Fprint(cmd.OutOrStdout(), out)
		for _, f := range changed {
			shown[f.name()] = f
		}
	}
}

// changedRows renders the changed tasks. A table's rows are cut from a
// table of every task and of every row printed before (shown), so that
// columns never get narrower than what was printed above them.
func changedRows(files, changed []manifestFile, shown map[string]manifestFile, o *getOptions) (string, error) {
	now := time.Now()
	if o.output != "" && o.output != "wide" {
		return showFiles(changed, o, true, now)
	}
	all := append(slices.Clone(changed), files...) // changed first: theirs are the rows printed
	for _, f := range shown {
		all = append(all, f)
	}
	// The header counts in the widths, as it did in the first table.
	table, err := showFiles(all, o, false, now)
	if err != nil {
		return "", err
	}
	lines := strings.SplitAfter(table, "\n")
	if !o.noHeaders && len(lines) > 0 {
		lines = lines[1:]
	}
	want := map[string]bool{}
	for _, f := range changed {
		want[f.name()] = true
	}
	var b strings.Builder
	for i, f := range all {
		if i < len(lines) && want[f.name()] {
			b.WriteString(lines[i])
			delete(want, f.name())
		}
	}
	return b.String(), nil
}

// watchKeys maps each task name to what get -w compares: the task as JSON
// (spec and status), or the file's error; never the time.
func watchKeys(files []manifestFile) map[string]string {
	out := make(map[string]string, len(files))
	for _, f := range files {
		k := ""
		if f.task != nil {
			data, _ := json.Marshal(f.task)
			k = string(data)
		}
		if f.err != nil {
			k += "\x00" + f.err.Error()
		}
		out[f.name()] = k
	}
	return out
}

// deletedFile stands for a task whose manifest is gone, shown once by get -w.
func deletedFile(name string) manifestFile {
	return taskFile(name+".yaml", &v1alpha1.Task{
		Metadata: v1alpha1.ObjectMeta{Name: name},
		Status:   v1alpha1.TaskStatus{Phase: "Deleted"},
	})
}

func selectName(files []manifestFile, name string) []manifestFile {
	for _, f := range files {
		if f.name() == name {
			return []manifestFile{f}
		}
	}
	return nil
}

// render prints files as a table (output "" or "wide"), as task/NAME
// lines, or as JSON/YAML objects.
func render(w io.Writer, files []manifestFile, output string, noHeaders, single bool, now time.Time) error {
	switch output {
	case "json", "yaml":
		return renderObjects(w, files, output, single)
	case "name":
		for _, f := range files {
			fmt.Fprintf(w, "task/%s\n", cell(f.name()))
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
	onEveryCPU(len(files), func(i int) { rows[i] = fileRow(files[i], wide, now) })
	_, err := io.WriteString(w, alignColumns(lines[:len(lines)+len(files)], 3))
	return err
}

// fileRow is f's line of the table (its cells tab-separated, without its
// newline), with the -o wide columns when wide.
func fileRow(f manifestFile, wide bool, now time.Time) string {
	const noWide = "\t-\t-\t-\t-\t-"
	var row string
	switch {
	case f.notRead:
		row = cell(f.name()) + "\tNew\t-\t-\t-\t-\tNotRead"
		if wide {
			row += noWide
		}
	case f.invalid():
		row = cell(f.name()) + "\tInvalid\t-\t-\t-\t-\t" + cell(oneLine(f.err))
		if wide {
			row += noWide
		}
	default:
		row = tableRow(f.row, now)
		if wide {
			row += "\t" + wideColumns(f.row, f.learned, now)
		}
	}
	return row
}

// renderObjects prints the parseable tasks of files as JSON or YAML: a
// list, or the one task of `get NAME`.
func renderObjects(w io.Writer, files []manifestFile, output string, single bool) error {
	tasks := []*v1alpha1.Task{}
	for _, f := range files {
		if f.task != nil {
			tasks = append(tasks, f.task)
		}
	}
	var obj any = map[string]any{"items": tasks}
	if single && len(tasks) == 1 {
		obj = tasks[0]
	}
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
// generation, the queue position, the ETA (taskETA: the profile's time per
// item and the running batch's reported pace, for a task not ended) and
// the labels.
func wideColumns(r *reconcile.ListRow, learned *reconcile.ProfileEstimate, now time.Time) string {
	threads, gen, queue, etaCol := "-", "-", "-", "-"
	if d, ok := taskETA(r, learned, now); ok {
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

// printTable prints the final table of a run.
func printTable(w io.Writer, tasks []*v1alpha1.Task, now time.Time) {
	files := make([]manifestFile, 0, len(tasks))
	for _, t := range tasks {
		files = append(files, taskFile("", t))
	}
	var b strings.Builder
	_ = render(&b, files, "", false, false, now)
	fmt.Fprint(w, safeText(b.String()))
}

// tableRow is r's line of the table (its cells tab-separated, no newline).
func tableRow(r *reconcile.ListRow, now time.Time) string {
	phase := string(r.Phase)
	if phase == "" {
		phase = "New"
	}
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	progress := "-"
	if r.Total > 0 {
		progress = itoa(r.Done) + "/" + itoa(r.Total)
		if reported, _, _, ok := runningReport(r, now); ok && reported > 0 {
			// Items the running batch reports done, not committed yet.
			progress += " +" + itoa(reported)
		}
	}
	batch, memory := "-", "-"
	if c := r.Reservation; c != nil {
		batch = itoa(c.Batch) + "/" + itoa(c.BatchRequested)
		memory = humanBytes(c.Memory)
	} else if lb := r.LastBatch; lb != nil {
		batch = "#" + itoa(lb.Index)
		if lb.PeakMemory >= 0 {
			memory = "peak " + humanBytes(lb.PeakMemory)
		}
	}
	age := "-"
	if r.Start != nil {
		age = duration.HumanDuration(now.Sub(time.Unix(*r.Start, 0)))
	}
	return cell(r.Name) + "\t" + cell(phase) + "\t" + progress + "\t" + batch + "\t" + memory + "\t" + age + "\t" + cell(r.Reason())
}

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

// warnUnserved says, on w, that no controller serves the spool when a
// listed task still waits for one (not terminal): its phase and reason
// would otherwise stay empty, or stale, with nothing saying why.
func warnUnserved(w io.Writer, spool string, files []manifestFile) {
	waiting := false
	for _, f := range files {
		if f.task != nil && !v1alpha1.IsTerminal(f.task.Status.Phase) {
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
