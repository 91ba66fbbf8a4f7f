package reconcile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/lardon3d/lardon3d-controller/pkg/trust"
)

// stateDirParts are the directories of a state directory the batches
// write in: the tasks' logs and the run directory (items files, the
// group journal).
var stateDirParts = []string{logsDirName, "run"}

// makeStateDir makes the state directory and each of its parts where
// missing, each checked to be the controller's own. One rule for the
// start and for every batch: a state directory removed while the
// controller runs (rm -rf SPOOL/.lardon3d) is made again, whole, by the
// next batch that needs it, not by the next restart.
func makeStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if err := trust.OwnDir(dir, "state directory"); err != nil {
		return err
	}
	for _, part := range stateDirParts {
		sub := filepath.Join(dir, part)
		if err := os.Mkdir(sub, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("state directory: %w", err)
		}
		if err := trust.OwnDir(sub, "state directory"); err != nil {
			return err
		}
	}
	return nil
}
