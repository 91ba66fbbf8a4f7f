package v1alpha1

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

type strictConfig struct {
	MaxParallel   *int               `json:"maxParallel,omitempty"`
	Capacity      *resource.Quantity `json:"memoryCapacity,omitempty"`
	LoadThreshold *float64           `json:"loadThreshold,omitempty"`
	Dirs          []string           `json:"scratchDirs,omitempty"`
}

func TestDecodeStrictReportsLinesAndSuggestions(t *testing.T) {
	var c strictConfig
	err := DecodeStrict([]byte("# budgets\nmaxParalel: 2\nmemoryCapacity: 4GB\nloadThreshold: high\nscratchDirs: [/a]\nscratchDirs: [/b]\n"), &c)
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want an ErrorList, got %T %v", err, err)
	}
	want := []string{
		"line 2: maxParalel: unknown field, did you mean maxParallel?",
		`line 3: memoryCapacity: must be a quantity such as 512Mi, 4Gi or 1.5G (did you mean 4Gi?), got "4GB"`,
		`line 4: loadThreshold: must be a number, got "high"`,
		"line 6: scratchDirs: duplicate key, first written at line 5",
	}
	if got := strings.Split(list.Error(), "; "); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDecodeStrictDecodesAValidFile(t *testing.T) {
	var c strictConfig
	if err := DecodeStrict([]byte("maxParallel: 3\nmemoryCapacity: 8Gi\nloadThreshold: 0.75\nscratchDirs: [/tmp]\n"), &c); err != nil {
		t.Fatal(err)
	}
	if *c.MaxParallel != 3 || c.Capacity.Value() != 8<<30 || *c.LoadThreshold != 0.75 || len(c.Dirs) != 1 {
		t.Fatalf("decoded %+v", c)
	}
	// An integer where a float is wanted is a float.
	if err := DecodeStrict([]byte("loadThreshold: 2\n"), &c); err != nil || *c.LoadThreshold != 2 {
		t.Fatalf("loadThreshold: 2: %v %v", err, *c.LoadThreshold)
	}
	if err := DecodeStrict([]byte(""), &c); err == nil {
		t.Fatal("an empty file decoded")
	}
	if err := DecodeStrict([]byte("a: 1"), c); err == nil {
		t.Fatal("a non-pointer was accepted")
	}
}

func TestQuantitySuggestion(t *testing.T) {
	for in, want := range map[string]string{
		"4GB": "4Gi", "4gb": "4Gi", "4 GiB": "4Gi", "4g": "4Gi", "512MB": "512Mi", "1.5TB": "1.5Ti", "100kb": "100Ki",
		"4Gi": "4Gi", "lots": "", "4B": "", "4XB": "", "": "", "GB": "",
	} {
		got, ok := QuantitySuggestion(in)
		if got != want || ok != (want != "") {
			t.Errorf("QuantitySuggestion(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if msg := QuantityError("4GB"); !strings.Contains(msg, "did you mean 4Gi (4,294,967,296 bytes)?") || !strings.Contains(msg, "Ki, Mi, Gi") {
		t.Errorf("QuantityError(4GB) = %q", msg)
	}
	if msg := QuantityError("lots"); strings.Contains(msg, "did you mean") || strings.Contains(msg, "^") {
		t.Errorf("QuantityError(lots) = %q", msg)
	}
}

func TestWarningsFlagSmallMemory(t *testing.T) {
	task, err := ParseManifest("t.yaml", []byte(`apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: ["true"]
  items: {count: 1}
  resources:
    perThread: {memory: 100}
    fixed: {memory: 1Ki}
    scratch: 1023
`))
	if err != nil {
		t.Fatal(err)
	}
	got := Warnings(task)
	if strings.Join(got.Paths(), ",") != "spec.resources.perThread.memory,spec.resources.scratch" {
		t.Fatalf("warnings %v", got)
	}
	if got[0].Error() != "spec.resources.perThread.memory: is only 100 bytes, likely a number missing its unit (did you mean 100Mi or 100Gi?)" {
		t.Fatalf("warning text %q", got[0].Error())
	}
}
