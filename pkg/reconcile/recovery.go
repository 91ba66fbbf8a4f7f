package reconcile

import (
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// killLeftovers kills what a previous controller on the same state
// directory left behind: the process groups (and cgroups) on record, then
// every batch cgroup left under the subtree (with sweep: no batch of
// another spool runs there yet); otherwise every process of this user
// carrying the state directory in its environment. It returns how many
// processes it killed. Every record is removed once handled.
func killLeftovers(stateDir string, cgroups *cgroup.Tree, sweep bool, log zerolog.Logger) int {
	total := 0
	kill := func(task string, pg runner.ProcessGroup) error {
		n, err := runner.KillLeftover(pg)
		total += n
		if n > 0 {
			log.Info().Str("task", task).Int("pgid", pg.PGID).Int("killed", n).Msg("killed the leftovers of a previous controller")
		}
		return err
	}
	journal := filepath.Join(stateDir, "run", groupJournalName)
	lines, err := readGroupJournal(journal)
	handled := err == nil
	if err != nil {
		log.Warn().Str("file", journal).Err(err).Msg("group journal not read to its end")
	}
	for _, l := range lines {
		if err := kill(l.Task, *l.Start); err != nil {
			log.Warn().Str("task", l.Task).Int("pgid", l.Start.PGID).Err(err).Msg("leftover process group not handled")
			handled = false
		}
	}
	if handled {
		_ = os.Remove(journal)
	} // else kept: a later start tries its groups again
	// The records of a controller of an earlier version: one file per
	// group in its task's run directory.
	files, _ := filepath.Glob(filepath.Join(stateDir, "run", "*", "group-*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		var pg runner.ProcessGroup
		if err == nil {
			err = json.Unmarshal(data, &pg)
		}
		if err == nil {
			err = kill(filepath.Base(filepath.Dir(f)), pg)
		}
		if err != nil {
			log.Warn().Str("file", f).Err(err).Msg("leftover process group not handled")
			continue
		}
		_ = os.Remove(f)
	}
	if cgroups != nil && sweep {
		// Every batch is born in a cgroup under the subtree: what is
		// there is all that can be left, whatever session it moved to.
		n, err := runner.KillLeftoverCgroups(cgroups)
		if err != nil {
			log.Warn().Err(err).Msg("leftover batch cgroups not all handled")
		}
		if n > 0 {
			log.Info().Int("killed", n).Str("cgroup", cgroups.Dir()).Msg("killed the leftovers of a previous controller in their cgroups")
		}
		return total + n
	}
	n, err := runner.KillByEnv(StateDirEnv, stateDir)
	if err != nil {
		log.Warn().Err(err).Msg("scanning for leftover batch processes")
	}
	if n > 0 {
		log.Info().Int("killed", n).Msg("killed leftover batch processes found by their environment")
	}
	return total + n
}
