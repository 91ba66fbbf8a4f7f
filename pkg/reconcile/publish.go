package reconcile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

// publishBudgets publishes the governor's live view for the budgets verb.
func (c *Controller) publishBudgets() {
	if err := publishBudgets(c.cfg.StateDir, c.host.gov.Budgets(), time.Now()); err != nil {
		c.log.Debug().Err(err).Msg("budgets not published")
	}
}

// historyInterval and historyBatchMax bound how long and how many
// measured batches wait in memory for their append to the store: one
// transaction (and its fsync) per interval, not per batch. The book has
// them at once; a kill -9 loses at most the interval's records from the
// store, never what the book learned in this run.
const (
	historyInterval = 250 * time.Millisecond
	historyBatchMax = 256
)

// flushHistory appends the records gathered so far to the store, in one
// transaction. A failed append is logged and the records dropped: the
// book has them for this run. REQUIRES: owner goroutine.
func (c *Controller) flushHistory() {
	c.historyAt = time.Now()
	if len(c.pendingHistory) == 0 {
		return
	}
	c.estimatesDirty = true
	c.host.appendHistory(c.pendingHistory, c.log)
	clear(c.pendingHistory)
	c.pendingHistory = c.pendingHistory[:0]
}

// publishEstimates publishes every profile's model for the estimates verb,
// and the newest batches for the batches verb, when they changed.
// REQUIRES: owner goroutine.
func (c *Controller) publishEstimates() {
	learned := c.host.learned.Load()
	if !c.estimatesDirty && learned == c.estimatesLearned {
		return
	}
	if err := publishEstimates(c.cfg.StateDir, Estimates(c.host.book)); err != nil {
		c.log.Debug().Err(err).Msg("estimates not published")
		return
	}
	if err := publishBatches(c.cfg.StateDir, c.host.book); err != nil {
		c.log.Debug().Err(err).Msg("batches not published")
		return
	}
	c.estimatesDirty, c.estimatesLearned = false, learned
}

// PublishFile replaces STATE/name with data, atomically (a dotfile
// renamed over it): a reader sees the old version or the new one, never
// an empty or partial file, and a write that fails (a full disk) leaves
// the old version and no dotfile behind. The web view's series are
// published so too.
func PublishFile(stateDir, name string, data []byte) error {
	tmp := filepath.Join(stateDir, "."+name+".tmp")
	err := os.WriteFile(tmp, data, 0o640)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(stateDir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// publishJSON publishes v as JSON in STATE/name (PublishFile).
func publishJSON(stateDir, name string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return PublishFile(stateDir, name, data)
}
