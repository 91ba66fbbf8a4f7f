package main

import (
	"fmt"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

// closestName is v1alpha1.ClosestName: one rule for every "did you mean".
func closestName(name string, candidates []string) (string, bool) {
	return v1alpha1.ClosestName(name, candidates)
}

// unknownTaskError says that no task of dir is called name, with a
// suggestion when another task's name is a likely typo of it.
func unknownTaskError(dir, name string, files []listing.File) error {
	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.Name())
	}
	if near, ok := closestName(name, names); ok {
		return fmt.Errorf("no task %q in %s; did you mean %q?", name, dir, near)
	}
	return fmt.Errorf("no task %q in %s", name, dir)
}
