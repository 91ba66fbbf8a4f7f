package main

import "testing"

func TestClosestName(t *testing.T) {
	names := []string{"features", "matching", "mapper", "mesh"}
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"featurs", "features", true},
		{"mapr", "mapper", true},
		{"mesh2", "mesh", true},
		{"reconstruction", "", false},
		{"features", "", false}, // itself is not a suggestion
	} {
		got, ok := closestName(c.name, names)
		if got != c.want || ok != c.ok {
			t.Errorf("closestName(%q) = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestTailLines(t *testing.T) {
	for _, c := range []struct {
		data string
		n    int
		want string
	}{
		{"a\nb\nc\n", -1, "a\nb\nc\n"},
		{"a\nb\nc\n", 0, ""},
		{"a\nb\nc\n", 1, "c\n"},
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc\n", 5, "a\nb\nc\n"},
		{"a\nb\nc", 1, "c"},
		{"a\nb\nc", 2, "b\nc"},
		{"", 3, ""},
	} {
		if got := string(tailLines([]byte(c.data), c.n)); got != c.want {
			t.Errorf("tailLines(%q, %d) = %q, want %q", c.data, c.n, got, c.want)
		}
	}
}
