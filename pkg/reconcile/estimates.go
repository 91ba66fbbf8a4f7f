package reconcile

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/history"
)

// estimatesFile is where a running controller publishes every profile's
// model: the history store is locked by the controller while it runs.
const estimatesFile = "estimates.json"

// ProfileEstimate is what the history says of one profile, for people.
type ProfileEstimate struct {
	// Profile is the history's key.
	Profile string `json:"profile"`
	// State of the model: none, censored, slow-start or firm.
	State string `json:"state"`
	// Samples succeeded, Censored were killed for memory, of Total batches.
	Samples  int `json:"samples"`
	Censored int `json:"censored"`
	Total    int `json:"total"`
	// Fitted costs in bytes, without margins.
	FittedFixed     int64 `json:"fittedFixedBytes"`
	FittedPerItem   int64 `json:"fittedPerItemBytes"`
	FittedPerThread int64 `json:"fittedPerThreadBytes"`
	// FittedPerInputByte is the memory per byte of input files, and
	// InputPerItem the profile's mean input per item, when the model has
	// an input term (0 otherwise).
	FittedPerInputByte float64 `json:"fittedPerInputByte,omitempty"`
	InputPerItem       int64   `json:"inputPerItemBytes,omitempty"`
	// Residual is the upper quantile of the residuals, in bytes.
	Residual int64 `json:"residualBytes"`
	// Costs are the estimate the model gives (margins included), when OK.
	Costs history.Costs `json:"costs"`
	OK    bool          `json:"ok"`
	// Note qualifies the suggested costs.
	Note string `json:"note,omitempty"`
	// MaxItems, MaxThreads and MaxPeak of the successful batches.
	MaxItems   int64 `json:"maxItems"`
	MaxThreads int   `json:"maxThreads"`
	MaxPeak    int64 `json:"maxPeakBytes"`
	// DurationFixed and DurationPerItem of the successful batches.
	DurationFixed   time.Duration `json:"durationFixed"`
	DurationPerItem time.Duration `json:"durationPerItem"`
	// EfficientBatch is the batch with the least predicted time per item
	// when larger batches cost more per item (0: none seen).
	EfficientBatch int64 `json:"efficientBatch,omitempty"`
	// BatchCost is the fit behind EfficientBatch, which gives the cap of
	// --batch-policy efficient (BatchCap), the batch.max to suggest.
	BatchCost history.BatchCost `json:"batchCost,omitzero"`
	// Efficiency is the mean peak ÷ reserved memory.
	Efficiency float64 `json:"efficiency"`
	// LastBatch is when the newest batch ended.
	LastBatch time.Time `json:"lastBatch"`
}

// BatchCap is the batch cap --batch-policy efficient puts on the
// profile's batches (0: none): its BatchCost's Cap, or EfficientBatch
// where the fit is not known (a summary published before it was).
func (e ProfileEstimate) BatchCap() int64 {
	return max(e.BatchCost.Cap(), e.EfficientBatch)
}

// EstimateOf summarises a profile of book.
func EstimateOf(book *history.Book, profile string) ProfileEstimate {
	s := Suggest(book, profile)
	m := s.Model
	return ProfileEstimate{
		Profile: profile, State: m.State.String(),
		Samples: m.Samples, Censored: m.Censored, Total: m.Total,
		FittedFixed: int64(m.Fixed), FittedPerItem: int64(m.PerItem), FittedPerThread: int64(m.PerThread),
		FittedPerInputByte: m.PerInputByte, InputPerItem: int64(m.InputPerItem),
		Residual: int64(m.Residual), Costs: s.Costs, OK: s.OK, Note: s.Note,
		MaxItems: m.MaxItems, MaxThreads: m.MaxThreads, MaxPeak: m.MaxPeak,
		DurationFixed: m.DurationFixed, DurationPerItem: m.DurationPerItem, EfficientBatch: m.EfficientBatch, BatchCost: m.BatchCost,
		Efficiency: m.Efficiency, LastBatch: m.LastTime,
	}
}

// Estimates summarises every profile of book, sorted by profile.
func Estimates(book *history.Book) []ProfileEstimate {
	var out []ProfileEstimate
	for _, p := range book.Profiles() {
		out = append(out, EstimateOf(book, p))
	}
	return out
}

// publishEstimates writes every profile's summary into stateDir, atomically.
func publishEstimates(stateDir string, est []ProfileEstimate) error {
	return publishJSON(stateDir, estimatesFile, est)
}

// ReadEstimates returns every profile's summary from the history a
// controller of stateDir keeps at historyPath ("": STATE/history.db):
// from the store when no controller holds it, else from what the running
// controller published in stateDir. No history at all is an empty list.
func ReadEstimates(stateDir, historyPath string) ([]ProfileEstimate, error) {
	var out []ProfileEstimate
	all, fromStore, err := readHistory(stateDir, historyPath, estimatesFile, &out)
	if err != nil || !fromStore {
		return out, err
	}
	book := history.NewBook(0, history.Params{})
	book.Load(all)
	return Estimates(book), nil
}

// readHistory reads the history store at historyPath ("":
// STATE/history.db) read-only when no controller holds it (fromStore);
// else it decodes into published the file name a running controller
// publishes in stateDir. No store, or no such file, is no error and
// nothing read.
func readHistory(stateDir, historyPath, name string, published any) (all map[string][]history.Record, fromStore bool, err error) {
	path := historyPath
	if path == "" {
		path = filepath.Join(stateDir, history.FileName)
	}
	s, err := history.Open(path, history.Options{ReadOnly: true})
	switch {
	case err == nil:
		defer s.Close()
		all, _, err := s.Load()
		return all, err == nil, err
	case errors.Is(err, os.ErrNotExist):
		return nil, false, nil
	case !errors.Is(err, history.ErrLocked):
		return nil, false, err
	}
	data, err := os.ReadFile(filepath.Join(stateDir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(data, published); err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	return nil, false, nil
}

// openHistory opens the store at path, imports the former stores of the
// state directories importFrom (importHistory), and loads it into book. A store
// that cannot be opened (held, unreadable) leaves the controller with the
// in-memory book only, and says so; a store bbolt finds invalid is moved
// aside (never deleted) and a new one started.
func openHistory(path string, book *history.Book, log zerolog.Logger, importFrom ...string) *history.Store {
	aside := func(err error) bool {
		to := fmt.Sprintf("%s.corrupt-%d", path, time.Now().Unix())
		if rerr := os.Rename(path, to); rerr != nil {
			return false
		}
		log.Warn().Err(err).Str("movedTo", to).Msg("history store unreadable; moved aside, starting a new one")
		return true
	}
	s, err := history.Open(path, history.Options{})
	if err != nil && !errors.Is(err, history.ErrLocked) && !errors.Is(err, os.ErrPermission) && aside(err) {
		s, err = history.Open(path, history.Options{})
	}
	if err != nil {
		log.Warn().Err(err).Msg("history store not opened; learning in memory only for this run")
		return nil
	}
	for _, stateDir := range importFrom {
		importHistory(s, stateDir, log)
	}
	all, skipped, err := s.Load()
	if errors.Is(err, history.ErrCorrupt) {
		// Opened, but its pages do not read: as unreadable as above.
		_ = s.Close()
		if !aside(err) {
			log.Warn().Err(err).Msg("history store not loaded; learning in memory only for this run")
			return nil
		}
		if s, err = history.Open(path, history.Options{}); err != nil {
			log.Warn().Err(err).Msg("history store not opened; learning in memory only for this run")
			return nil
		}
		all, skipped, err = s.Load()
	}
	if err != nil {
		log.Warn().Err(err).Msg("history store not loaded; learning from new batches only")
		return s
	}
	if skipped > 0 {
		log.Warn().Int("skipped", skipped).Msg("history records that do not decode were skipped")
	}
	book.Load(all)
	n := 0
	for _, r := range all {
		n += len(r)
	}
	log.Info().Int("profiles", len(all)).Int("batches", n).Msg("history loaded")
	return s
}

// importHistory moves the records of a spool's own history store (what a
// controller kept in STATE/history.db before the history was the
// machine's) into store, once: the old file is renamed
// history.db.imported. A store that cannot be read is left as it is.
func importHistory(store *history.Store, stateDir string, log zerolog.Logger) {
	old := filepath.Join(stateDir, history.FileName)
	if store == nil || old == store.Path() {
		return
	}
	if _, err := os.Stat(old); err != nil {
		return
	}
	s, err := history.Open(old, history.Options{ReadOnly: true})
	if err != nil {
		log.Warn().Err(err).Str("file", old).Msg("the spool's former history not imported")
		return
	}
	all, _, err := s.Load()
	_ = s.Close()
	if err != nil {
		log.Warn().Err(err).Str("file", old).Msg("the spool's former history not imported")
		return
	}
	var entries []history.Entry
	for profile, recs := range all {
		for _, r := range recs {
			entries = append(entries, history.Entry{Profile: profile, Record: r})
		}
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Record.Time.Before(entries[j].Record.Time) })
	if err := store.Append(entries...); err != nil {
		log.Warn().Err(err).Str("file", old).Msg("the spool's former history not imported")
		return
	}
	if err := os.Rename(old, old+".imported"); err != nil {
		log.Warn().Err(err).Str("file", old).Msg("the spool's former history imported but not renamed: it will be imported again")
		return
	}
	log.Info().Int("batches", len(entries)).Str("from", old).Str("into", store.Path()).Msg("the spool's former history joined the machine's")
}
