package reconcile

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// budgetsFile is where a running controller publishes its live budgets, so
// that `budgets` shows them whether or not it is asked from the controller.
const budgetsFile = "budgets.json"

// publishedBudgets is the file's content.
type publishedBudgets struct {
	WrittenAt time.Time            `json:"writtenAt"`
	Budgets   governor.BudgetsView `json:"budgets"`
}

// publishBudgets writes the governor's view into stateDir, atomically.
func publishBudgets(stateDir string, v governor.BudgetsView, now time.Time) error {
	data, err := json.Marshal(publishedBudgets{WrittenAt: now, Budgets: v})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(stateDir, "."+budgetsFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(stateDir, budgetsFile))
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
