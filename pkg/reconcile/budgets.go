package reconcile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/procfs"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// budgetsFile is where a running controller publishes its live budgets, so
// that `budgets` shows them whether or not it is asked from the controller.
const budgetsFile = "budgets.json"

// publishedBudgets is the file's content.
type publishedBudgets struct {
	WrittenAt time.Time            `json:"writtenAt"`
	Budgets   governor.BudgetsView `json:"budgets"`
	// ControllerRSS is the controller's own resident memory (bytes) when
	// it wrote the file: what its bookkeeping costs the machine, in no
	// budget but shown beside them (0: unknown).
	ControllerRSS int64 `json:"controllerRSS,omitempty"`
}

// publishBudgets writes the governor's view into stateDir, atomically.
func publishBudgets(stateDir string, v governor.BudgetsView, now time.Time) error {
	return publishJSON(stateDir, budgetsFile, publishedBudgets{WrittenAt: now, Budgets: v, ControllerRSS: selfRSS()})
}

// selfRSS is the controller's resident memory in bytes (0: unreadable).
func selfRSS() int64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	p, err := fs.Self()
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return int64(st.ResidentMemory())
}

// ReadControllerRSS is the controller's own resident memory as it last
// published it in stateDir (0: unknown).
func ReadControllerRSS(stateDir string) int64 {
	data, err := os.ReadFile(filepath.Join(stateDir, budgetsFile))
	if err != nil {
		return 0
	}
	var pb publishedBudgets
	if json.Unmarshal(data, &pb) != nil {
		return 0
	}
	return pb.ControllerRSS
}

// ReadBudgets reads the budgets a controller published in stateDir and when
// it wrote them.
func ReadBudgets(stateDir string) (governor.BudgetsView, time.Time, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, budgetsFile))
	if err != nil {
		return governor.BudgetsView{}, time.Time{}, err
	}
	var pb publishedBudgets
	if err := json.Unmarshal(data, &pb); err != nil {
		return governor.BudgetsView{}, time.Time{}, fmt.Errorf("%s: %w", budgetsFile, err)
	}
	return pb.Budgets, pb.WrittenAt, nil
}

// writeErrorsFile is where a running controller lists the tasks whose
// status it cannot write (the file cannot show it), for describe.
const writeErrorsFile = "status-write-errors.json"

// WriteError is a task whose status writes fail: the controller retries
// with backoff until one lands.
type WriteError struct {
	// File is the manifest.
	File string `json:"file"`
	// Error is the last attempt's error.
	Error string `json:"error"`
	// Attempts failed in a row.
	Attempts int `json:"attempts"`
	// Since is the first failure of the run.
	Since time.Time `json:"since"`
}

// publishWriteErrors replaces the list of failing status writes in
// stateDir; an empty list removes the file.
func publishWriteErrors(stateDir string, errs map[string]WriteError) error {
	path := filepath.Join(stateDir, writeErrorsFile)
	if len(errs) == 0 {
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	return publishJSON(stateDir, writeErrorsFile, errs)
}

// ReadWriteErrors returns the failing status writes a running controller
// published in stateDir, by task name (none when the file is absent).
func ReadWriteErrors(stateDir string) (map[string]WriteError, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, writeErrorsFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var errs map[string]WriteError
	if err := json.Unmarshal(data, &errs); err != nil {
		return nil, fmt.Errorf("%s: %w", writeErrorsFile, err)
	}
	return errs, nil
}
