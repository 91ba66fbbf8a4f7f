package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func newGetCommand(g *globals) *cobra.Command {
	var output string
	var watch bool
	cmd := &cobra.Command{
		Use:   "get [NAME]",
		Short: "List tasks as a table, or print them as JSON or YAML",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch output {
			case "", "wide", "json", "yaml":
			default:
				return &exitError{code: 2, err: fmt.Errorf("-o %q: want json or yaml", output)}
			}
			w := cmd.OutOrStdout()
			show := func() (string, error) {
				files, err := readSpool(g.spool)
				if err != nil {
					return "", err
				}
				if len(args) == 1 {
					one := selectName(files, args[0])
					if len(one) == 0 {
						return "", unknownTaskError(g.spool, args[0], files)
					}
					files = one
				}
				var b strings.Builder
				if err := render(&b, files, output, len(args) == 1, time.Now()); err != nil {
					return "", err
				}
				if output == "json" {
					return safeJSON(b.String()), nil
				}
				return safeText(b.String()), nil
			}
			out, err := show()
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			fmt.Fprint(w, out)
			if !watch {
				return nil
			}
			return followSpool(cmd, g.spool, out, show)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: a table)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after listing, follow changes")
	return cmd
}

// followSpool reprints the view whenever the spool changes, until the
// command's context ends.
func followSpool(cmd *cobra.Command, dir, last string, show func() (string, error)) error {
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
	for {
		select {
		case <-cmd.Context().Done():
			return nil
		case _, ok := <-watcher.Events:
			if !ok {
				return nil
			}
		case <-watcher.Errors:
		case <-tick.C:
		}
		out, err := show()
		if err != nil || out == last {
			continue
		}
		last = out
		fmt.Fprint(cmd.OutOrStdout(), "\n"+out)
	}
}

func selectName(files []manifestFile, name string) []manifestFile {
	for _, f := range files {
		if f.name() == name {
			return []manifestFile{f}
		}
	}
	return nil
}

// render prints files as a table, or as JSON/YAML objects.
func render(w io.Writer, files []manifestFile, output string, single bool, now time.Time) error {
	switch output {
	case "json", "yaml":
		var tasks []*v1alpha1.Task
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
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPHASE\tPROGRESS\tBATCH\tMEMORY\tAGE\tREASON")
	for _, f := range files {
		if f.invalid() {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t%s\n", cell(f.name()), "Invalid", cell(oneLine(f.err)))
			continue
		}
		fmt.Fprintln(tw, tableRow(f.task, now))
	}
	return tw.Flush()
}

// printTable prints the final table of a run.
func printTable(w io.Writer, tasks []*v1alpha1.Task, now time.Time) {
	files := make([]manifestFile, 0, len(tasks))
	for _, t := range tasks {
		files = append(files, manifestFile{task: t})
	}
	var b strings.Builder
	_ = render(&b, files, "", false, now)
	fmt.Fprint(w, safeText(b.String()))
}

func tableRow(t *v1alpha1.Task, now time.Time) string {
	st := t.Status
	phase := string(st.Phase)
	if phase == "" {
		phase = "New"
	}
	progress := "-"
	if st.Progress.ItemsTotal > 0 {
		progress = fmt.Sprintf("%d/%d", st.Progress.ItemsDone, st.Progress.ItemsTotal)
	}
	batch, memory := "-", "-"
	if r := st.Reservation; r != nil {
		batch = fmt.Sprintf("%d/%d", r.Batch, r.BatchRequested)
		memory = humanBytes(r.Memory.Value())
	} else if lb := st.LastBatch; lb != nil {
		batch = fmt.Sprintf("#%d", lb.Index)
		if lb.PeakMemory != nil {
			memory = "peak " + humanBytes(lb.PeakMemory.Value())
		}
	}
	age := "-"
	if st.StartTime != nil {
		age = duration.HumanDuration(now.Sub(st.StartTime.Time))
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", cell(t.Metadata.Name), cell(phase), progress, batch, memory, age, cell(reasonOf(st)))
}

// reasonOf is the reason worth showing: the first False condition's, else "".
func reasonOf(st v1alpha1.TaskStatus) string {
	for _, typ := range []string{v1alpha1.ConditionValid, v1alpha1.ConditionDependenciesReady, v1alpha1.ConditionAdmitted, v1alpha1.ConditionComplete, v1alpha1.ConditionSpecApplied} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Status == "False" {
			return c.Reason
		}
	}
	return ""
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
