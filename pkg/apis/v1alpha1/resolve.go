package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// ErrNoItems: items.glob matched no file.
var ErrNoItems = errors.New("no items")

// SpecHash identifies a spec: the first 16 hex digits of the SHA-256 of its
// canonical JSON (fields in declaration order, map keys sorted, quantities
// in canonical form, so 1Gi and 1024Mi hash alike). spec.paused and
// spec.restartToken are left out: pausing, resuming or asking for a
// restart is not a new generation. Hash the defaulted spec (as
// ParseManifest returns it), so that writing a default explicitly is not an
// edit either.
func SpecHash(spec TaskSpec) string {
	spec.Paused, spec.RestartToken = false, ""
	b, err := json.Marshal(spec)
	if err != nil {
		// A TaskSpec always marshals; keep the hash total anyway.
		b = fmt.Appendf(nil, "%#v", spec)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// InputsHash identifies what a task's committed progress is progress over:
// its items and its working directory. A new generation with the same
// InputsHash may continue from the previous one's progress.
func InputsHash(spec TaskSpec) string {
	b, err := json.Marshal(struct {
		Items      Items  `json:"items"`
		WorkingDir string `json:"workingDir"`
	}{spec.Items, spec.WorkingDir})
	if err != nil {
		b = fmt.Appendf(nil, "%#v %q", spec.Items, spec.WorkingDir)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ResolveWorkingDir is the directory the command runs in and items are
// resolved against: spec.workingDir when absolute, joined to spoolDir when
// relative, spoolDir when empty. The result is cleaned, not made absolute.
func ResolveWorkingDir(spec TaskSpec, spoolDir string) string {
	switch wd := spec.WorkingDir; {
	case wd == "":
		return filepath.Clean(spoolDir)
	case filepath.IsAbs(wd):
		return filepath.Clean(wd)
	default:
		return filepath.Join(spoolDir, wd)
	}
}

// ItemList is a task's resolved items, in order. For items.count, item i
// is the decimal i and nothing is stored: a count of ten million costs
// nothing until a batch takes its range. For files and globs, it holds
// the paths. Not an API type: no deep copy is generated.
//
// +kubebuilder:object:generate=false
type ItemList struct {
	count   int64
	paths   []string
	counted bool
}

// CountedItems is the list of n counted items, "0" … "n-1".
func CountedItems(n int64) ItemList { return ItemList{count: n, counted: true} }

// PathItems is the list of the given paths.
func PathItems(paths []string) ItemList { return ItemList{paths: paths} }

// Len is the number of items.
func (l ItemList) Len() int64 {
	if l.counted {
		return l.count
	}
	return int64(len(l.paths))
}

// Range is items [lo, hi), made as strings for a count. REQUIRES: 0 <=
// lo <= hi <= Len().
func (l ItemList) Range(lo, hi int64) []string {
	if !l.counted {
		return l.paths[lo:hi]
	}
	out := make([]string, hi-lo)
	for i := range out {
		out[i] = strconv.FormatInt(lo+int64(i), 10)
	}
	return out
}

// Paths are the items when they are paths (nil for a count).
func (l ItemList) Paths() []string { return l.paths }

// ResolveItems lists the task's items, baseDir being the spool directory:
//   - count n: "0" … "n-1", not stored (ItemList);
//   - files: each path made absolute against the working directory, in the
//     order given;
//   - glob: the absolute paths matching the pattern (relative to the working
//     directory), sorted; an error wrapping ErrNoItems when nothing matches.
func ResolveItems(spec TaskSpec, baseDir string) (ItemList, error) {
	it := spec.Items
	switch {
	case it.Count != nil:
		n := *it.Count
		if n < 0 || n > MaxItemCount {
			return ItemList{}, fmt.Errorf("resolve items: count %d out of [0, %d]", n, MaxItemCount)
		}
		return CountedItems(n), nil
	case it.Files != nil:
		wd, err := filepath.Abs(ResolveWorkingDir(spec, baseDir))
		if err != nil {
			return ItemList{}, fmt.Errorf("resolve items: working directory: %w", err)
		}
		out := make([]string, len(it.Files))
		for i, f := range it.Files {
			if filepath.IsAbs(f) {
				out[i] = filepath.Clean(f)
			} else {
				out[i] = filepath.Join(wd, f)
			}
		}
		return PathItems(out), nil
	case it.Glob != "":
		wd, err := filepath.Abs(ResolveWorkingDir(spec, baseDir))
		if err != nil {
			return ItemList{}, fmt.Errorf("resolve items: working directory: %w", err)
		}
		out, err := Glob(it.Glob, wd)
		if err != nil {
			return ItemList{}, fmt.Errorf("resolve items: glob %q: %w", it.Glob, err)
		}
		if len(out) == 0 {
			return ItemList{}, fmt.Errorf("resolve items: glob %q in %s: %w", it.Glob, wd, ErrNoItems)
		}
		return PathItems(out), nil
	}
	return ItemList{}, fmt.Errorf("resolve items: none of count, files, glob is set: %w", ErrNoItems)
}

// Glob lists the absolute, sorted, distinct paths matching pattern, taken
// relative to the absolute directory wd unless absolute: *, ?, [a-z], **
// for any depth and {a,b} for alternatives (github.com/bmatcuk/doublestar).
// Glob characters in wd itself are literal. It is the one expansion of
// items.glob: the controller and validate both use it, through
// ResolveItems.
//
// The walk is bounded (globFS): it follows a link to a directory only
// inside the tree it starts from, never into a loop, and stops with
// ErrGlobTooLarge past globMaxEntries entries read or globMaxTime.
func Glob(pattern, wd string) ([]string, error) {
	var base, rel string
	if filepath.IsAbs(pattern) {
		// The part before the first wildcard is where the walk starts.
		base, rel = doublestar.SplitPattern(filepath.ToSlash(filepath.Clean(pattern)))
		base = filepath.FromSlash(base)
	} else {
		// Cleaned, a relative pattern's ".." come first: they move the base.
		base, rel = wd, path.Clean(filepath.ToSlash(pattern))
		for rel == ".." || strings.HasPrefix(rel, "../") {
			base, rel = filepath.Dir(base), strings.TrimPrefix(strings.TrimPrefix(rel, ".."), "/")
		}
	}
	if rel == "" {
		rel = "."
	}
	fsys := newGlobFS(base)
	out, err := doublestar.Glob(fsys, rel)
	if fsys.exhausted {
		return nil, tooLarge()
	}
	if err != nil {
		return nil, err
	}
	for i, m := range out {
		out[i] = filepath.Join(base, filepath.FromSlash(m))
	}
	sort.Strings(out)
	return slices.Compact(out), nil
}
