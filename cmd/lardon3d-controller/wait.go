package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
)

// waitForever is what a negative --timeout means, as in kubectl: a week.
const waitForever = 7 * 24 * time.Hour

// waitRecheck is how often wait reads the manifests again when fsnotify
// says nothing (it may drop events); waitSettle how long it lets a burst
// of events settle before reading them.
const (
	waitRecheck = time.Second
	waitSettle  = 50 * time.Millisecond
)

func newWaitCommand(g *globals) *cobra.Command {
	a := &taskArgs{}
	var forSpec string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait (NAME... | -l SELECTOR | --all) --for=phase=PHASE|condition=TYPE[=STATUS]|delete [--timeout=30s]",
		Short: "Wait until tasks reach a phase, show a condition, or are deleted (kubectl wait)",
		Long: `Wait until every task named (or selected with -l, or --all: those there
when wait starts) reaches a phase, shows a condition, or is deleted, as
kubectl wait does. It reads the statuses in the manifests, whether or not
a controller runs, and follows the spool's changes.

  --for=phase=Done                  status.phase is Done (any phase:
                                    Pending, Running, Paused, Done, Failed...)
  --for=condition=Complete          the condition Complete is True
  --for=condition=Complete=False    ... is False (any condition, any status)
  --for=delete                      the manifest is gone (a name that does
                                    not exist is deleted already)

It prints task/NAME condition met for each task as it meets the condition
and exits 0 when all have. After --timeout (default 30s; 0 checks once, a
negative one waits a week) it prints, for each task still waiting,
  error: timed out waiting for the condition on task/NAME
and exits 1. A task in a final phase (Done, Failed, Rejected) that does not
meet the condition never will unless its spec is edited or retried: wait
says so at once and exits 1 instead of waiting out the timeout (a status
the controller has not written for the task's current spec yet, after
an edit or a retry, is waited for, not judged). A task deleted while waited
for a phase or condition also ends the wait with exit 1.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			want, err := parseWaitFor(forSpec)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if timeout < 0 {
				timeout = waitForever
			}
			targets, err := waitTargets(g.spool, a, args, want)
			if err != nil {
				return err
			}
			if len(targets) == 0 && !want.deleted && !a.byName() {
				return &exitError{code: exitNotDone, err: errors.New("no matching resources found")}
			}
			return waitUntil(cmd, g.spool, targets, want, time.Now().Add(timeout))
		},
	}
	a.addFlags(cmd, true)
	cmd.Flags().StringVar(&forSpec, "for", "", "the condition to wait for: phase=PHASE, condition=TYPE[=STATUS] (STATUS True by default) or delete")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait before giving up: 0 checks once, a negative value waits a week")
	return cmd
}

// waitFor is what --for asks of a task: exactly one of a phase, a
// condition's status, or the manifest's deletion.
type waitFor struct {
	phase     v1alpha1.Phase
	condition string
	status    metav1.ConditionStatus
	deleted   bool
}

// parseWaitFor parses --for: phase=PHASE, condition=TYPE[=STATUS] or
// delete; phases and statuses match whatever their case.
func parseWaitFor(s string) (waitFor, error) {
	kind, arg, _ := strings.Cut(s, "=")
	switch strings.ToLower(kind) {
	case "delete":
		if arg == "" {
			return waitFor{deleted: true}, nil
		}
	case "phase":
		for _, p := range v1alpha1.Phases {
			if strings.EqualFold(arg, string(p)) {
				return waitFor{phase: p}, nil
			}
		}
		phases := make([]string, len(v1alpha1.Phases))
		for i, p := range v1alpha1.Phases {
			phases[i] = string(p)
		}
		return waitFor{}, fmt.Errorf("--for=%s: want a phase among %s", s, strings.Join(phases, ", "))
	case "condition":
		typ, status, hasStatus := strings.Cut(arg, "=")
		if typ == "" {
			break
		}
		w := waitFor{condition: typ, status: metav1.ConditionTrue}
		if hasStatus {
			switch strings.ToLower(status) {
			case "true":
			case "false":
				w.status = metav1.ConditionFalse
			case "unknown":
				w.status = metav1.ConditionUnknown
			default:
				return waitFor{}, fmt.Errorf("--for=%s: a condition's status is True, False or Unknown", s)
			}
		}
		return w, nil
	}
	return waitFor{}, fmt.Errorf("--for=%q: want phase=PHASE, condition=TYPE[=STATUS] or delete", s)
}

// waitTarget is a task waited for: its name and its manifest's path;
// met once it met the condition.
type waitTarget struct {
	name, path string
	met        bool
}

// waitTargets are the tasks a names, or selects: for --for=delete, a
// name that no manifest holds is a target already met.
func waitTargets(dir string, a *taskArgs, names []string, want waitFor) ([]*waitTarget, error) {
	var out []*waitTarget
	if want.deleted && a.byName() {
		if _, err := a.check(names); err != nil {
			return nil, &exitError{code: exitUsage, err: err}
		}
		files, err := readSpool(dir)
		if err != nil {
			return nil, &exitError{code: exitNotDone, err: err}
		}
		for _, arg := range names {
			found, err := selectTasks(dir, files, []string{arg}, nil)
			if err != nil { // deleted already
				out = append(out, &waitTarget{name: taskArg(arg)})
				continue
			}
			for _, f := range found {
				out = append(out, &waitTarget{name: f.Name(), path: f.Path})
			}
		}
		return out, nil
	}
	files, err := a.files(dir, names)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		out = append(out, &waitTarget{name: f.Name(), path: f.Path})
	}
	return out, nil
}

// waitUntil checks the targets whenever the spool changes (and every
// waitRecheck) until all meet want, one never can, or the deadline
// passes; see newWaitCommand for what it prints.
func waitUntil(cmd *cobra.Command, dir string, targets []*waitTarget, want waitFor, deadline time.Time) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	// check judges the targets not met yet; done: all are met.
	check := func() (done bool, err error) {
		done = true
		for _, t := range targets {
			if t.met {
				continue
			}
			f, ok := readTarget(t)
			v, why := want.judge(t.name, f, ok)
			switch v {
			case waitMet:
				t.met = true
				fmt.Fprintf(stdout, "task/%s condition met\n", cell(t.name))
			case waitNever:
				return false, &exitError{code: exitNotDone, err: fmt.Errorf("task/%s %s", t.name, why)}
			default:
				done = false
			}
		}
		return done, nil
	}
	watcher, err := fsnotify.NewWatcher()
	if err == nil {
		defer watcher.Close()
		err = watcher.Add(dir)
	}
	var events <-chan fsnotify.Event
	if err == nil {
		events = watcher.Events
	}
	recheck := time.NewTicker(waitRecheck)
	defer recheck.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	expire := time.NewTimer(time.Until(deadline))
	defer expire.Stop()
	for {
		if done, err := check(); done || err != nil {
			return err
		}
		if !time.Now().Before(deadline) {
			return timedOut(stderr, dir, targets)
		}
		select {
		case <-cmd.Context().Done():
			return timedOut(stderr, dir, targets)
		case <-expire.C:
		case <-recheck.C:
		case _, ok := <-events:
			if !ok {
				events = nil
			}
			settle.Reset(waitSettle)
			continue
		case <-settle.C:
		}
	}
}

// timedOut says, as kubectl does, which targets did not meet the
// condition in time, and that no controller serves the spool if none
// does: exit 1.
func timedOut(w io.Writer, dir string, targets []*waitTarget) error {
	for _, t := range targets {
		if !t.met {
			fmt.Fprintf(w, "error: timed out waiting for the condition on task/%s\n", cell(t.name))
		}
	}
	if _, ok, err := registry.Serving(dir); !ok && err == nil {
		fmt.Fprintln(w, noController(dir))
	}
	return &exitError{code: exitNotDone}
}

// readTarget reads t's manifest; ok false when it is gone, or holds
// another task now.
func readTarget(t *waitTarget) (f listing.File, ok bool) {
	if t.path == "" {
		return listing.File{}, false
	}
	if _, err := os.Lstat(t.path); errors.Is(err, fs.ErrNotExist) {
		return listing.File{}, false
	}
	f = readManifest(t.path)
	if errors.Is(f.Err, fs.ErrNotExist) || (f.Row != nil && f.Name() != t.name) {
		return listing.File{}, false
	}
	return f, true
}

// waitVerdict is what a task's status says of a condition.
type waitVerdict int

const (
	waitPending waitVerdict = iota // not met yet
	waitMet                        // met
	waitNever                      // can never be met: see waitFor.judge
)

// judge says whether the task called name, read as f (ok false: gone),
// meets w. A task whose status is for its current spec and in a final
// phase moves no more until an edit or a retry: if it does not meet w
// it never will (waitNever, with why). A status the controller wrote
// for an earlier spec, or a file that cannot be read right now (a writer
// halfway), is waitPending.
func (w waitFor) judge(name string, f listing.File, ok bool) (waitVerdict, string) {
	if w.deleted {
		if !ok {
			return waitMet, ""
		}
		return waitPending, ""
	}
	if !ok {
		return waitNever, "was deleted"
	}
	if f.Task == nil {
		return waitPending, ""
	}
	st := f.Task.Status
	if st.SpecHash != "" && st.SpecHash != v1alpha1.SpecHash(f.Task.Spec) {
		return waitPending, "" // an edit or a retry the controller has not taken yet
	}
	if w.meets(st) {
		return waitMet, ""
	}
	if !v1alpha1.IsTerminal(st.Phase) {
		return waitPending, ""
	}
	why := string(st.Phase)
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete); c != nil && c.Message != "" {
		why += " (" + c.Reason + ": " + c.Message + ")"
	}
	return waitNever, fmt.Sprintf("is %s, a final phase, and %s: it never will unless its spec is edited or it is retried", cell(why), w.unmet())
}

// meets reports whether st shows what w waits for.
func (w waitFor) meets(st v1alpha1.TaskStatus) bool {
	if w.phase != "" {
		return st.Phase == w.phase
	}
	for _, c := range st.Conditions {
		if strings.EqualFold(c.Type, w.condition) {
			return c.Status == w.status
		}
	}
	return false
}

// unmet says what w waits for, as not met.
func (w waitFor) unmet() string {
	if w.phase != "" {
		return "not " + string(w.phase)
	}
	return fmt.Sprintf("its condition %s is not %s", w.condition, w.status)
}
