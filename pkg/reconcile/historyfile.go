package reconcile

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/history"
)

// appendHistory appends entries to the host's store. The store survives
// what happens to its file while the controller runs, as at start
// (openHistory): a file damaged (bbolt panics on scribbled pages) is moved
// aside, never deleted; one removed or replaced is left as it is; either
// way a new file is opened at the path and the book, which holds
// everything this run knows, is written into it, and the controller warns
// once. A store that cannot be opened again leaves the run learning in
// memory only, as at start. Called from the spools' owner goroutines: the
// store is replaced under Host.historyMu.
func (h *Host) appendHistory(entries []history.Entry, log zerolog.Logger) {
	h.historyMu.Lock()
	defer h.historyMu.Unlock()
	if h.store == nil {
		return
	}
	err := h.store.Append(entries...)
	if err == nil {
		return
	}
	corrupt, gone := errors.Is(err, history.ErrCorrupt), errors.Is(err, history.ErrGone)
	if !corrupt && !gone {
		log.Warn().Err(err).Int("records", len(entries)).Msg("history not persisted")
		return
	}
	path := h.store.Path()
	if !corrupt {
		_ = h.store.Close()
	}
	// A damaged store is left open: bbolt may have panicked holding its
	// own lock, which Close would wait for forever. Its descriptor and
	// mapping stay until the controller exits, once per accident.
	h.store = nil
	ev := log.Warn().Err(err)
	if corrupt {
		to := fmt.Sprintf("%s.corrupt-%d", path, time.Now().Unix())
		if rerr := os.Rename(path, to); rerr != nil {
			log.Warn().Err(err).AnErr("rename", rerr).Msg("history store damaged while running and not moved aside; learning in memory only for this run")
			return
		}
		ev = ev.Str("movedTo", to)
	}
	s, oerr := history.Open(path, history.Options{})
	if oerr != nil {
		log.Warn().Err(err).AnErr("open", oerr).Msg("history store lost while running; learning in memory only for this run")
		return
	}
	book := bookEntries(h.book)
	if aerr := s.Append(book...); aerr != nil {
		ev = ev.AnErr("rewrite", aerr)
	}
	h.store = s
	ev.Int("batches", len(book)).Str("file", path).Msg("history store damaged or removed while running; a new one holds what this run knows")
}

// bookEntries are every record of the book, oldest first.
func bookEntries(b *history.Book) []history.Entry {
	var out []history.Entry
	for _, p := range b.Profiles() {
		for _, r := range b.Records(p) {
			out = append(out, history.Entry{Profile: p, Record: r})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Record.Time.Before(out[j].Record.Time) })
	return out
}
