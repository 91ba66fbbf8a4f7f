package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// maxStdinManifest bounds what `validate -` reads, as the spool bounds a
// manifest file.
const maxStdinManifest = spool.DefaultMaxFileSize

func newValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE|DIR|-...",
		Short: "Check manifests offline: errors exit 1, warnings (what will fail at run time) exit 0",
		Long: `Check manifests offline. Each argument is a manifest file, a directory (its
manifests, as the controller would list them) or - for standard input.

An error (a manifest the controller rejects) makes validate exit 1. A warning
is printed for what is legal but will fail or is likely a mistake, and keeps
exit 0: a command not found in PATH, a workingDir that does not exist, an
items.glob that matches nothing, a memory amount under 1Ki (a number without
its unit), a dependsOn naming no task among the manifests checked and their
directories, and two files with one task name.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return validate(cmd.OutOrStdout(), cmd.InOrStdin(), args)
		},
	}
}

// checked is one manifest validate looked at.
type checked struct {
	label string // as printed: the path, or <stdin>
	dir   string // the directory its relative paths resolve against
	task  *v1alpha1.Task
	err   error
}

func validate(w io.Writer, stdin io.Reader, args []string) error {
	var files []checked
	for _, arg := range args {
		got, err := validateInputs(arg, stdin)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		files = append(files, got...)
	}
	// Names a dependsOn may refer to: every manifest checked, and every
	// manifest beside them (a spool is checked file by file too).
	known := map[string]bool{}
	owners := map[string][]string{}
	dirs := map[string]bool{}
	for _, f := range files {
		if f.task != nil && f.task.Metadata.Name != "" {
			known[f.task.Metadata.Name] = true
			owners[f.task.Metadata.Name] = append(owners[f.task.Metadata.Name], f.label)
		}
		dirs[f.dir] = true
	}
	for dir := range dirs {
		for _, n := range manifestNames(dir) {
			known[n] = true
		}
	}
	names := make([]string, 0, len(known))
	for n := range known {
		names = append(names, n)
	}
	bad, warned := 0, 0
	for _, f := range files {
		if f.err != nil {
			bad++
			fmt.Fprintf(w, "%s: invalid\n", cell(f.label))
			for _, line := range problemLines(f.err) {
				fmt.Fprintf(w, "  %s\n", cell(line))
			}
			continue
		}
		warns := runtimeWarnings(f.task, f.dir)
		for _, dep := range f.task.Spec.DependsOn {
			if known[dep] {
				continue
			}
			msg := fmt.Sprintf("spec.dependsOn: no task %q among the manifests checked or beside them; the task would wait (DependencyMissing)", dep)
			if near, ok := v1alpha1.ClosestName(dep, names); ok {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			warns = append(warns, msg)
		}
		if o := owners[f.task.Metadata.Name]; len(o) > 1 {
			warns = append(warns, fmt.Sprintf("metadata.name %q is also the name of %s: the controller runs only one of them", f.task.Metadata.Name, strings.Join(others(o, f.label), ", ")))
		}
		if len(warns) == 0 {
			fmt.Fprintf(w, "%s: valid\n", cell(f.label))
			continue
		}
		warned++
		fmt.Fprintf(w, "%s: valid, %d warning(s)\n", cell(f.label), len(warns))
		for _, m := range warns {
			fmt.Fprintf(w, "  warning: %s\n", cell(m))
		}
	}
	if bad > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d manifests invalid", bad, len(files))}
	}
	return nil
}

func others(all []string, self string) []string {
	var out []string
	for _, o := range all {
		if o != self {
			out = append(out, o)
		}
	}
	return out
}

// readBounded reads the file at path, refusing one of more than max bytes
// as the controller does (spool.DefaultMaxFileSize) before parsing it: a
// huge file is neither read whole nor parsed for minutes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("larger than %d bytes, the most a controller reads of a manifest: the controller would refuse it too", max)
	}
	return data, nil
}

// validateInputs reads one argument: a file, a directory's manifests, or -.
func validateInputs(arg string, stdin io.Reader) ([]checked, error) {
	if arg == "-" {
		data, err := io.ReadAll(io.LimitReader(stdin, maxStdinManifest+1))
		if err != nil {
			return nil, fmt.Errorf("-: %w", err)
		}
		wd, _ := os.Getwd()
		f := checked{label: "<stdin>", dir: wd}
		if len(data) > maxStdinManifest {
			f.err = fmt.Errorf("more than %d bytes", maxStdinManifest)
			return []checked{f}, nil
		}
		f.task, f.err = v1alpha1.ParseManifest("stdin.yaml", data)
		return []checked{f}, nil
	}
	st, err := os.Stat(arg)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		f := checked{label: arg, dir: filepath.Dir(arg)}
		data, err := readBounded(arg, spool.DefaultMaxFileSize)
		if f.err = err; err == nil {
			f.task, f.err = v1alpha1.ParseManifest(filepath.Base(arg), data)
		}
		return []checked{f}, nil
	}
	ents, err := os.ReadDir(arg)
	if err != nil {
		return nil, err
	}
	var out []checked
	for _, de := range ents {
		if !spool.IsManifestName(de.Name()) {
			continue
		}
		mf := readManifest(filepath.Join(arg, de.Name()))
		out = append(out, checked{label: mf.Path, dir: arg, task: mf.Task, err: mf.Err})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no manifests (*.yaml, *.yml) in this directory", arg)
	}
	return out, nil
}

// manifestNames lists the task names of dir's manifests (nil when dir
// cannot be read).
func manifestNames(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, de := range ents {
		if !spool.IsManifestName(de.Name()) {
			continue
		}
		if mf := readManifest(filepath.Join(dir, de.Name())); mf.Task != nil {
			out = append(out, mf.Name())
		}
	}
	return out
}

// runtimeWarnings lists what a valid task will certainly fail on, or is
// likely a mistake, on this machine now; dir is the spool directory its
// relative paths resolve against.
func runtimeWarnings(t *v1alpha1.Task, dir string) []string {
	var out []string
	for _, w := range v1alpha1.Warnings(t) {
		out = append(out, w.Error())
	}
	wd := v1alpha1.ResolveWorkingDir(t.Spec, dir)
	wdOK := true
	if st, err := os.Stat(wd); err != nil || !st.IsDir() {
		wdOK = false
		out = append(out, fmt.Sprintf("spec.workingDir: %s does not exist or is not a directory; every batch would fail to start", wd))
	}
	if len(t.Spec.Command) > 0 {
		if msg := commandProblem(t.Spec, wd); msg != "" {
			out = append(out, "spec.command[0]: "+msg+"; every batch would fail (CommandNotFound)")
		}
	}
	if t.Spec.Items.Glob != "" && wdOK {
		if _, err := v1alpha1.ResolveItems(t.Spec, dir); errors.Is(err, v1alpha1.ErrNoItems) {
			out = append(out, fmt.Sprintf("spec.items.glob: %q matches nothing in %s; the task would be Rejected unless files appear before it starts", t.Spec.Items.Glob, wd))
		}
	}
	return out
}

// commandProblem says why the command's program cannot be run, as the
// runner looks it up (runner.LookPath: PATH from spec.env when set there,
// a relative path with a slash from the working directory); "" when it
// can, or when it depends on $(VAR) expansion.
func commandProblem(spec v1alpha1.TaskSpec, wd string) string {
	name := spec.Command[0]
	if strings.Contains(name, "$(") {
		return ""
	}
	path := os.Getenv("PATH")
	for _, e := range spec.Env {
		if e.Name == "PATH" {
			if strings.Contains(e.Value, "$(") {
				return ""
			}
			path = e.Value
		}
	}
	if _, err := runner.LookPath(name, path, wd); err != nil {
		return err.Error()
	}
	return ""
}

// problemLines shows an error one problem a line: each entry of an
// ErrorList, else the error's own lines.
func problemLines(err error) []string {
	var list v1alpha1.ErrorList
	if errors.As(err, &list) {
		out := make([]string, len(list))
		for i, e := range list {
			out[i] = v1alpha1.ErrorList{e}.Error()
		}
		return out
	}
	return strings.Split(err.Error(), "\n")
}
