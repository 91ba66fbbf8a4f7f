package history

import (
	"sort"
	"sync"
)

// Book is the in-memory view of the history: the records of every profile
// and their models, refitted only after a change. It does no IO, so it can
// be asked under another package's lock. Safe for concurrent use.
type Book struct {
	params     Params
	maxRecords int

	mu struct {
		sync.Mutex
		recs   map[string][]Record
		models map[string]Model // fitted since the profile's last Add
		// gpuModels are the GPU memory models (GPURecords), likewise.
		gpuModels map[string]Model
	}
}

// NewBook returns an empty book keeping maxRecords per profile (0: the
// store's default), fitting with p.
func NewBook(maxRecords int, p Params) *Book {
	if maxRecords <= 0 {
		maxRecords = DefaultMaxRecords
	}
	b := &Book{params: p.withDefaults(), maxRecords: maxRecords}
	b.mu.recs = make(map[string][]Record)
	b.mu.models = make(map[string]Model)
	b.mu.gpuModels = make(map[string]Model)
	return b
}

// Params are the book's fitting parameters, defaults filled.
func (b *Book) Params() Params { return b.params }

// Load replaces the book's records (a Store's Load).
func (b *Book) Load(all map[string][]Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.recs = make(map[string][]Record, len(all))
	b.mu.models = make(map[string]Model)
	b.mu.gpuModels = make(map[string]Model)
	for p, recs := range all {
		if len(recs) > b.maxRecords {
			recs = recs[len(recs)-b.maxRecords:]
		}
		b.mu.recs[p] = append([]Record(nil), recs...)
	}
}

// Add appends a record to a profile, dropping its oldest beyond the bound.
func (b *Book) Add(profile string, r Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	recs := append(b.mu.recs[profile], r)
	if len(recs) > b.maxRecords {
		recs = append(recs[:0:0], recs[len(recs)-b.maxRecords:]...)
	}
	b.mu.recs[profile] = recs
	delete(b.mu.models, profile)
	delete(b.mu.gpuModels, profile)
}

// Model is the profile's model (StateNone when unknown).
func (b *Book) Model(profile string) Model {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m, ok := b.mu.models[profile]; ok {
		return m
	}
	m := Fit(b.mu.recs[profile], b.params)
	b.mu.models[profile] = m
	return m
}

// GPUModel is the model of the profile's GPU memory: Fit of its
// GPURecords (StateNone when no batch of it had a GPU memory contract).
func (b *Book) GPUModel(profile string) Model {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m, ok := b.mu.gpuModels[profile]; ok {
		return m
	}
	m := Fit(GPURecords(b.mu.recs[profile]), b.params)
	b.mu.gpuModels[profile] = m
	return m
}

// Records returns a copy of a profile's records, oldest first.
func (b *Book) Records(profile string) []Record {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Record(nil), b.mu.recs[profile]...)
}

// Profiles lists the profiles with records, sorted.
func (b *Book) Profiles() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.mu.recs))
	for p := range b.mu.recs {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
