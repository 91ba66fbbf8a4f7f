package main

import (
	"testing"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "1", "LARDON3D_THREADS": "2"}
	for in, want := range map[string]string{
		"$(A)":                 "1",
		"x$(LARDON3D_THREADS)": "x2",
		"$(B)":                 "$(B)",
		"$$(A)":                "$(A)",
		"$$":                   "$",
		"$A":                   "$A",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func mk(name string, deps ...string) task {
	return task{t: v1alpha1.Task{Metadata: v1alpha1.ObjectMeta{Name: name}, Spec: v1alpha1.TaskSpec{DependsOn: deps}}}
}

func TestTopo(t *testing.T) {
	order, err := topo([]task{mk("map", "match"), mk("feat"), mk("match", "feat"), mk("other")})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tk := range order {
		names = append(names, tk.t.Metadata.Name)
	}
	if got, want := len(names), 4; got != want || names[0] != "feat" || names[1] != "match" || names[2] != "map" || names[3] != "other" {
		t.Errorf("order %v, want [feat match map other]", names)
	}
	if _, err := topo([]task{mk("a", "b"), mk("b", "a")}); err == nil {
		t.Error("a dependency cycle was accepted")
	}
	if _, err := topo([]task{mk("a", "zz")}); err == nil {
		t.Error("a missing dependency was accepted")
	}
}
