package reconcile

import (
	"cmp"
	"slices"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/history"
)

// batchesFile is where a running controller publishes the newest batches
// of the history for the batches verb, as estimatesFile for estimates:
// the store is locked while a controller runs.
const batchesFile = "batches.json"

// PublishedBatchesMax bounds batchesFile: the newest batches only (a store
// holds up to DefaultMaxRecords per profile for DefaultMaxProfiles
// profiles, too many to rewrite after every batch).
const PublishedBatchesMax = 2000

// BatchRow is one finished batch, for accounting (the batches verb).
type BatchRow struct {
	// Profile is the history's key; Task the task's name.
	Profile string `json:"profile"`
	Task    string `json:"task"`
	// Batch is the batch's index within its generation, from 0;
	// Generation and Attempt (1 for the first try), 0 when the record
	// predates them.
	Batch      int64 `json:"batch"`
	Generation int64 `json:"generation"`
	Attempt    int   `json:"attempt"`
	// Start and End bound the batch.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// ExitCode of the command (-1 when killed); Reason why it ended when
	// not a plain exit (MemoryExceeded, BatchTimeout, Cancelled...).
	ExitCode        int    `json:"exitCode"`
	Reason          string `json:"reason,omitempty"`
	KilledForMemory bool   `json:"killedForMemory,omitempty"`
	// Items and Threads the batch ran with.
	Items   int64 `json:"items"`
	Threads int   `json:"threads"`
	// ReservedBytes is the memory its contract reserved; PeakBytes its
	// need (working set where a cgroup measured it, else the peak);
	// PeakChargeBytes the peak charge, page cache included.
	ReservedBytes   int64 `json:"reservedBytes"`
	PeakBytes       int64 `json:"peakBytes"`
	PeakChargeBytes int64 `json:"peakChargeBytes"`
	// Efficiency is PeakBytes ÷ ReservedBytes (0 when nothing was
	// reserved), as describe's and the model's.
	Efficiency float64 `json:"efficiency"`
}

// Elapsed is the batch's duration.
func (r BatchRow) Elapsed() time.Duration { return r.End.Sub(r.Start) }

// rowOf is the accounting row of one record of profile.
func rowOf(profile string, r history.Record) BatchRow {
	row := BatchRow{
		Profile: profile, Task: r.Task, Batch: r.Batch, Generation: r.Generation, Attempt: r.Attempt,
		Start: r.Time.Add(-r.Duration), End: r.Time,
		ExitCode: r.ExitCode, Reason: r.Reason, KilledForMemory: r.KilledForMemory,
		Items: r.Items, Threads: r.Threads,
		ReservedBytes: r.LimitBytes, PeakBytes: r.Need(), PeakChargeBytes: r.PeakMemoryBytes,
	}
	if r.LimitBytes > 0 {
		row.Efficiency = float64(row.PeakBytes) / float64(r.LimitBytes)
	}
	return row
}

// BatchRows is every record of all (profile → records) as rows, oldest
// start first; limit > 0 keeps the newest limit.
func BatchRows(all map[string][]history.Record, limit int) []BatchRow {
	var rows []BatchRow
	for p, recs := range all {
		for _, r := range recs {
			rows = append(rows, rowOf(p, r))
		}
	}
	slices.SortFunc(rows, func(a, b BatchRow) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Task, b.Task), cmp.Compare(a.Generation, b.Generation),
			cmp.Compare(a.Batch, b.Batch), cmp.Compare(a.Attempt, b.Attempt), cmp.Compare(a.Profile, b.Profile))
	})
	if limit > 0 && len(rows) > limit {
		rows = rows[len(rows)-limit:]
	}
	return rows
}

// bookRecords is every profile's records in book.
func bookRecords(book *history.Book) map[string][]history.Record {
	all := make(map[string][]history.Record)
	for _, p := range book.Profiles() {
		all[p] = book.Records(p)
	}
	return all
}

// publishBatches writes the newest batches of book into stateDir, atomically.
func publishBatches(stateDir string, book *history.Book) error {
	return publishJSON(stateDir, batchesFile, BatchRows(bookRecords(book), PublishedBatchesMax))
}

// ReadBatches returns the batches of the history a controller of stateDir
// keeps at historyPath ("": STATE/history.db), oldest start first: every
// batch of the store when no controller holds it, else the newest
// PublishedBatchesMax the running controller published in stateDir. No
// history at all is an empty list.
func ReadBatches(stateDir, historyPath string) ([]BatchRow, error) {
	var rows []BatchRow
	all, fromStore, err := readHistory(stateDir, historyPath, batchesFile, &rows)
	if err != nil || !fromStore {
		return rows, err
	}
	return BatchRows(all, 0), nil
}
