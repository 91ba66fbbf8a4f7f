package v1alpha1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// exampleFiles lists every manifest under examples/tasks.
func exampleFiles(t testing.TB) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir("../../../examples/tasks", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 14 {
		t.Fatalf("found %d example manifests, want the 4 pipeline steps and the 10 classes", len(files))
	}
	return files
}

func TestExamplesParse(t *testing.T) {
	classes := map[TaskClass]bool{}
	names := map[string]string{}
	for _, f := range exampleFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		task, err := ParseManifest(filepath.Base(f), data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		// The schema line must point at the committed schema from where the file is.
		first, _, _ := strings.Cut(string(data), "\n")
		ref, ok := strings.CutPrefix(first, "# yaml-language-server: $schema=")
		if !ok {
			t.Errorf("%s: first line %q is not a yaml-language-server $schema line", f, first)
		} else if _, err := os.Stat(filepath.Join(filepath.Dir(f), ref)); err != nil {
			t.Errorf("%s: schema %s: %v", f, ref, err)
		}
		if other, dup := names[task.Metadata.Name]; dup {
			t.Errorf("%s and %s share metadata.name %q", f, other, task.Metadata.Name)
		}
		names[task.Metadata.Name] = f
		if strings.Contains(f, "classes") {
			classes[task.Spec.Class] = true
		}
	}
	for _, c := range Classes {
		if !classes[c] {
			t.Errorf("no example in examples/tasks/classes for class %s", c)
		}
	}
}

// TestPipelineDependsOn checks the demo pipeline is a chain whose
// dependencies all exist among the pipeline's own manifests.
func TestPipelineDependsOn(t *testing.T) {
	files, _ := filepath.Glob("../../../examples/tasks/*.yaml")
	if len(files) != 4 {
		t.Fatalf("pipeline has %d steps, want 4", len(files))
	}
	names := map[string]bool{}
	var prev string
	for _, f := range files { // Glob sorts: 10-, 20-, 30-, 40-
		data, _ := os.ReadFile(f)
		task, err := ParseManifest(filepath.Base(f), data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if prev == "" && len(task.Spec.DependsOn) != 0 {
			t.Errorf("%s: first step depends on %v", f, task.Spec.DependsOn)
		}
		if prev != "" && (len(task.Spec.DependsOn) != 1 || task.Spec.DependsOn[0] != prev) {
			t.Errorf("%s: dependsOn %v, want [%s]", f, task.Spec.DependsOn, prev)
		}
		if task.Spec.Items.Count == nil || task.Spec.Command[0] != "lardon3d-synth" {
			t.Errorf("%s: pipeline steps use items.count and lardon3d-synth", f)
		}
		names[task.Metadata.Name] = true
		prev = task.Metadata.Name
	}
}

// TestPipelineEstimatesCoverSynth checks each pipeline step's estimate is at
// least what its lardon3d-synth flags really allocate, and that the whole
// pipeline stays small (a few seconds of CPU).
func TestPipelineEstimatesCoverSynth(t *testing.T) {
	files, _ := filepath.Glob("../../../examples/tasks/*.yaml")
	var cpu time.Duration
	for _, f := range files {
		data, _ := os.ReadFile(f)
		task, err := ParseManifest(filepath.Base(f), data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		flags := map[string]string{}
		cmd := task.Spec.Command
		for i := 1; i+1 < len(cmd); i += 2 {
			flags[cmd[i]] = cmd[i+1]
		}
		r := task.Spec.Resources
		for flag, est := range map[string]*resource.Quantity{
			"--fixed": r.Fixed.Memory, "--per-item": r.PerItem.Memory, "--per-thread": r.PerThread.Memory,
		} {
			v, ok := flags[flag]
			if !ok {
				continue
			}
			synth := resource.MustParse(v)
			if est == nil || est.Cmp(synth) < 0 {
				t.Errorf("%s: estimate %v for %s is below what synth allocates (%s)", f, est, flag, v)
			}
		}
		per, err := time.ParseDuration(flags["--cpu-per-item"])
		if err != nil {
			t.Errorf("%s: --cpu-per-item: %v", f, err)
		}
		cpu += per * time.Duration(*task.Spec.Items.Count)
	}
	if cpu > 5*time.Second {
		t.Errorf("pipeline burns %v of CPU; keep it a few seconds", cpu)
	}
}
