package main

import (
	"fmt"
	"sort"
)

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// closestName is the candidate nearest to name, if one is near enough to
// be a typo of it: at most max(2, len/3) edits away. Ties go to the first
// in sorted order, so the suggestion does not depend on directory order.
func closestName(name string, candidates []string) (string, bool) {
	sorted := append([]string(nil), candidates...)
	sort.Strings(sorted)
	limit := max(2, len([]rune(name))/3)
	best, bestD := "", limit+1
	for _, c := range sorted {
		if d := editDistance(name, c); d < bestD && c != name {
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
