package main

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

// taskArgs are how a verb that acts on tasks names them, as kubectl's
// verbs do: NAME... (or task/NAME), or -l SELECTOR, or --all, one way
// only. Every such verb reads its arguments through files.
type taskArgs struct {
	selector string
	all      bool
}

// addFlags adds -l to cmd, and --all when all.
func (a *taskArgs) addFlags(cmd *cobra.Command, all bool) {
	cmd.Flags().StringVarP(&a.selector, "selector", "l", "", "the tasks whose labels match this selector, instead of names (k8s syntax: app=colmap,stage!=mesh,env in (a,b))")
	if all {
		cmd.Flags().BoolVar(&a.all, "all", false, "every task of the spool, instead of names")
	}
}

// byName reports whether the tasks are named, not selected.
func (a *taskArgs) byName() bool { return a.selector == "" && !a.all }

// files reads the spool at dir and returns the tasks names, or the
// selector, or --all name (selectTasks): a usage error (exit 2) when they
// name tasks in none or more than one way, exit 1 for an unknown name or
// a spool that cannot be read. A selector or --all that matches nothing
// is no error: the list is empty.
func (a *taskArgs) files(dir string, names []string) ([]listing.File, error) {
	sel, err := a.check(names)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: err}
	}
	all, err := readSpool(dir)
	if err != nil {
		return nil, &exitError{code: exitNotDone, err: err}
	}
	files, err := selectTasks(dir, all, names, sel)
	if err != nil {
		return nil, &exitError{code: exitNotDone, err: err}
	}
	return files, nil
}

// check says whether names and the flags name tasks exactly one way, and
// parses the selector (labels.Everything for --all).
func (a *taskArgs) check(names []string) (labels.Selector, error) {
	switch {
	case len(names) > 0 && a.selector != "":
		return nil, errors.New("a name cannot be given with a selector (-l)")
	case len(names) > 0 && a.all:
		return nil, errors.New("a name cannot be given with --all")
	case a.selector != "" && a.all:
		return nil, errors.New("-l and --all cannot be given together")
	case len(names) == 0 && a.byName():
		return nil, errors.New("no task given: name tasks, or select them with -l SELECTOR (or --all where the verb takes it)")
	}
	if a.all {
		return labels.Everything(), nil
	}
	sel, err := labels.Parse(a.selector)
	if err != nil {
		return nil, fmt.Errorf("-l %q: %w", a.selector, err)
	}
	return sel, nil
}

// selectTasks picks from files (the spool at dir, as read) the tasks
// called names, in the order given, all or none: one unknown name is an
// error that suggests the likely one, and nothing is picked. A name given
// twice is picked once; a name that several files claim (a duplicate) is
// picked with all of them. Without names, the tasks sel selects, in
// files' order.
func selectTasks(dir string, files []listing.File, names []string, sel labels.Selector) ([]listing.File, error) {
	if len(names) == 0 {
		return listing.SelectLabels(files, sel), nil
	}
	var out []listing.File
	seen := map[string]bool{}
	for _, arg := range names {
		name := taskArg(arg)
		if seen[name] {
			continue
		}
		seen[name] = true
		var named []listing.File
		for _, f := range files {
			if f.Name() == name {
				named = append(named, f)
			}
		}
		if len(named) == 0 {
			return nil, unknownTaskError(dir, name, files)
		}
		out = append(out, named...)
	}
	return out, nil
}

// noneSelected says on w that the selector or --all matched no task, as
// kubectl does, when files is empty and the tasks were not named.
func (a *taskArgs) noneSelected(w io.Writer, files []listing.File) bool {
	if len(files) > 0 || a.byName() {
		return false
	}
	fmt.Fprintln(w, "No resources found")
	return true
}

// parsedFiles is files (the tasks named or selected) less the manifests
// that are not parseable YAML, which are an error when named (a verb that
// edits manifests cannot) and left out when selected.
func (a *taskArgs) parsedFiles(dir string, names []string) ([]listing.File, error) {
	selected, err := a.files(dir, names)
	if err != nil {
		return nil, err
	}
	if err := refuseUnparseable(selected); err != nil && a.byName() {
		return nil, err
	}
	return slices.DeleteFunc(selected, listing.File.Unparseable), nil
}

// refuseUnparseable is an error naming the first of files that is not
// parseable YAML (a verb that edits manifests cannot), nil when none is.
func refuseUnparseable(files []listing.File) error {
	for _, f := range files {
		var syntax *v1alpha1.SyntaxError
		if f.Row == nil && f.Err != nil && !errors.As(f.Err, &syntax) {
			// Not read at all: say why, rather than blame its YAML.
			return &exitError{code: exitNotDone, err: fmt.Errorf("%s cannot be read: %w", f.Path, f.Err)}
		}
		if f.Unparseable() {
			return &exitError{code: exitNotDone, err: fmt.Errorf("%s is not parseable YAML; fix it first", f.Path)}
		}
	}
	return nil
}
