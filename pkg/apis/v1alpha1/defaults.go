package v1alpha1

import (
	"path/filepath"
	"strings"
)

// SetDefaults fills the fields the user may leave out. It is idempotent and
// treats a zero value as absent:
//   - metadata.name: the file name without its directory and its .yaml or
//     .yml extension;
//   - spec.class: custom;
//   - spec.resources.batch.min: 1;
//   - spec.resources.batch.max: the item count when items is count or files.
//     For glob it stays 0, meaning "the item count once resolved": use
//     BatchBounds.EffectiveMax;
//   - spec.resources.threads and minThreads: 1.
//
// ParseManifest applies the same defaults but keeps a 0 the user wrote
// explicitly, so that validation reports it.
func SetDefaults(t *Task, fileName string) {
	applyDefaults(t, fileName, func(string) bool { return false })
}

// applyDefaults is SetDefaults where explicit(path) reports a field the user
// wrote, which is never overwritten.
func applyDefaults(t *Task, fileName string, explicit func(path string) bool) {
	if t.Metadata.Name == "" {
		t.Metadata.Name = NameFromFile(fileName)
	}
	s := &t.Spec
	if s.Class == "" {
		s.Class = ClassCustom
	}
	r := &s.Resources
	if r.Batch.Min == 0 && !explicit("spec.resources.batch.min") {
		r.Batch.Min = 1
	}
	if r.Batch.Max == 0 && !explicit("spec.resources.batch.max") {
		if n, ok := ItemCount(*s); ok {
			r.Batch.Max = n
		}
	}
	if r.Threads == 0 && !explicit("spec.resources.threads") {
		r.Threads = 1
	}
	if r.MinThreads == 0 && !explicit("spec.resources.minThreads") {
		r.MinThreads = 1
	}
}

// NameFromFile is the default metadata.name of a manifest: its base name
// without a .yaml or .yml extension.
func NameFromFile(fileName string) string {
	base := filepath.Base(fileName)
	if base == "." || base == string(filepath.Separator) {
		return ""
	}
	for _, ext := range []string{".yaml", ".yml"} {
		if s, ok := strings.CutSuffix(base, ext); ok {
			return s
		}
	}
	return base
}

// ItemCount is the number of items when it is known without touching the
// filesystem: items.count, or the length of items.files. ok is false for
// glob (and for a spec with no items).
func ItemCount(s TaskSpec) (n int64, ok bool) {
	switch {
	case s.Items.Count != nil:
		return *s.Items.Count, true
	case len(s.Items.Files) > 0:
		return int64(len(s.Items.Files)), true
	}
	return 0, false
}

// EffectiveMax is the largest batch to ask for once the item count is known:
// Max, or itemsTotal when Max is 0 (the glob default) or larger than
// itemsTotal; never below 1.
func (b BatchBounds) EffectiveMax(itemsTotal int64) int64 {
	m := b.Max
	if m <= 0 || (itemsTotal > 0 && m > itemsTotal) {
		m = itemsTotal
	}
	return max(m, 1)
}

// EffectiveMin is the smallest batch to ask for once the item count is
// known: Min, capped by EffectiveMax, never below 1.
func (b BatchBounds) EffectiveMin(itemsTotal int64) int64 {
	return max(min(b.Min, b.EffectiveMax(itemsTotal)), 1)
}

// EffectiveBatchMax is s.Resources.Batch.EffectiveMax(itemsTotal).
func (s TaskSpec) EffectiveBatchMax(itemsTotal int64) int64 {
	return s.Resources.Batch.EffectiveMax(itemsTotal)
}
