package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// restartLong is the help of the restart verb.
const restartLong = `Apply an edit that waits now, as kubectl rollout restart applies a changed
template. An edit of a running task waits for its generation to end
(SpecApplied=False, SpecChangePending); restart writes a new
spec.restartToken into the manifest, and the controller then cancels the
batch in flight (its processes killed, its reservation released, its items
not committed) and starts the edited spec as the next generation at once.
The committed progress carries over as for any edit: when the items and
the working directory are unchanged, the items already committed are not
run again.

A task with no edit waiting is left alone (exit 0, with a message): unlike
kubectl's, this restart never kills a batch to run the same spec again,
which would only throw away its work. An edit that does not validate is
refused: the generation in flight is not cancelled for a spec that cannot
run. To run a Failed task again, use retry.`

// newRestartCommand builds `restart`: a new spec.restartToken in each
// named manifest whose edit waits for its worker.
func newRestartCommand(g *globals) *cobra.Command {
	a := &taskArgs{}
	cmd := &cobra.Command{
		Use:   "restart (NAME... | -l SELECTOR | --all)",
		Short: "Apply a waiting edit of running tasks now: cancel the batch in flight, start the edited spec from the committed progress",
		Long:  restartLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			selected, err := a.parsedFiles(g.spool, args)
			if err != nil {
				return err
			}
			var files []listing.File
			for _, f := range selected {
				if f.Task == nil {
					continue
				}
				switch why := editWaiting(f); {
				case why == "":
					files = append(files, f)
				case a.byName():
					fmt.Fprintf(cmd.OutOrStdout(), "task %s: %s; nothing to restart\n", cell(f.Name()), why)
				}
			}
			if a.noneSelected(cmd.ErrOrStderr(), files) || len(files) == 0 {
				return nil
			}
			return setTokens(g, files, "restart-", (*spool.Spool).SetRestartToken, func(f listing.File) string {
				st := f.Task.Status
				return fmt.Sprintf("task %s restarted (generation %d cancelled; the edit starts as generation %d)", cell(f.Name()), st.ObservedGeneration, st.ObservedGeneration+1)
			}, cmd)
		},
	}
	a.addFlags(cmd, true)
	return cmd
}

// editWaiting is "" when f holds a valid edit its controller keeps waiting
// for the generation in flight, else why not.
func editWaiting(f listing.File) string {
	st := f.Task.Status
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionSpecApplied)
	switch {
	case f.Err != nil:
		return "its edited spec is invalid (" + f.Err.Error() + ")"
	case c == nil || c.Status != "False" || c.Reason != v1alpha1.ReasonSpecChangePending || v1alpha1.SpecHash(f.Task.Spec) == st.SpecHash:
		return fmt.Sprintf("no edit waiting (%s at generation %d, spec applied)", phaseWord(st.Phase), st.ObservedGeneration)
	}
	return ""
}

// phaseWord is p, or what an empty phase means.
func phaseWord(p v1alpha1.Phase) string {
	if p == "" {
		return "not yet seen by a controller"
	}
	return string(p)
}
