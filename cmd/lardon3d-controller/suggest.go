package main

import (
	"fmt"
	"sort"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// closestName is the candidate nearest to name, if one is near enough to
// be a typo of it: at most max(2, len/3) edits away. Ties go to the first
// in sorted order, so the suggestion does not depend on directory order.
func closestName(name string, candidates []string) (string, bool) {
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	limit := max(2, len([]rune(name))/3)
	best, bestD := "", limit+1
	for _, c := range sorted {
		if d := v1alpha1.EditDistance(name, c); d < bestD && c != name {
			best, bestD = c, d
		}
	}
	return best, best != ""
}

// unknownTaskError says that no task of dir is called name, with a
// suggestion when another task's name is a likely typo of it.
func unknownTaskError(dir, name string, files []manifestFile) error {
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.name())
	}
	if near, ok := closestName(name, names); ok {
		return fmt.Errorf("no task %q in %s; did you mean %q?", name, dir, near)
	}
	return fmt.Errorf("no task %q in %s", name, dir)
}
