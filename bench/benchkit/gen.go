package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/lardon3d/lardon3d-controller/bench/internal/report"
	"github.com/lardon3d/lardon3d-controller/bench/internal/workload"
	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func numCPU() int { return runtime.NumCPU() }

// gen writes, under --dir: manifests/ (the controller's spool, as written),
// jobs-whole.txt and jobs-split2.txt (one shell line per job for the peers),
// and workload.env (figures run.sh needs).
func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	name := fs.String("workload", "A", "A, B, C, D or E")
	scale := fs.Float64("scale", 1, "task count and CPU scale")
	memScale := fs.Float64("mem-scale", 1, "memory scale")
	synth := fs.String("synth", "", "synthetic step binary")
	wrapper := fs.String("wrapper", "", "part wrapper script")
	dir := fs.String("dir", "", "output directory")
	results := fs.String("results", "", "results file")
	threads := fs.Int("threads", 1, "threads per task in the manifests")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *synth == "" || *wrapper == "" || *dir == "" || *results == "" {
		return fmt.Errorf("need --synth, --wrapper, --dir, --results: %w", errUsage)
	}
	p := workload.Params{Scale: *scale, MemScale: *memScale}
	var tasks []workload.Task
	switch *name {
	case "A":
		tasks = workload.A(p)
	case "B":
		tasks = workload.B(p)
	case "C":
		tasks = workload.C(p)
	case "D":
		tasks = workload.D(p)
	case "E":
		tasks = workload.E(p)
	default:
		return fmt.Errorf("workload %q: %w", *name, errUsage)
	}
	spool := filepath.Join(*dir, "manifests")
	if err := os.MkdirAll(spool, 0o755); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	// manifests-exact/ is the same workload declared at its real costs:
	// the reference of the cases whose manifests are not.
	exact := filepath.Join(*dir, "manifests-exact")
	if err := os.MkdirAll(exact, 0o755); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	for _, t := range workload.Exact(tasks) {
		if err := os.WriteFile(filepath.Join(exact, t.Name+".yaml"), []byte(workload.Manifest(*synth, t, *threads)), 0o644); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
	}
	var whole, split strings.Builder
	for _, t := range tasks {
		if err := os.WriteFile(filepath.Join(spool, t.Name+".yaml"), []byte(workload.Manifest(*synth, t, *threads)), 0o644); err != nil {
			return fmt.Errorf("gen: %w", err)
		}
		fmt.Fprintln(&whole, workload.JobLine(*wrapper, *synth, workload.Split(t, 1)[0]))
		for _, part := range workload.Split(t, 2) {
			fmt.Fprintln(&split, workload.JobLine(*wrapper, *synth, part))
		}
	}
	if err := os.WriteFile(filepath.Join(*dir, "jobs-whole.txt"), []byte(whole.String()), 0o644); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	if err := os.WriteFile(filepath.Join(*dir, "jobs-split2.txt"), []byte(split.String()), 0o644); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	s := workload.Sum(tasks)
	budget := p.Budget()
	var maxPart int64
	for _, t := range tasks {
		maxPart = max(maxPart, t.Memory(workload.Split(t, 2)[0].Items))
	}
	env := fmt.Sprintf("TASKS=%d\nITEMS=%d\nBUDGET=%d\nBUDGET_Q=%s\nMAX_WHOLE=%d\nMAX_PART2=%d\nSLOTS_WHOLE=%d\nCPU_NOMINAL=%.1f\n",
		len(tasks), s.Items, budget, workload.Quantity(budget), s.MaxWhole, maxPart, workload.Slots(s.MaxWhole, budget), s.CPUSeconds)
	if err := os.WriteFile(filepath.Join(*dir, "workload.env"), []byte(env), 0o644); err != nil {
		return fmt.Errorf("gen: %w", err)
	}
	lb := workload.LowerBound(s.CPUSeconds, s.MemorySeconds, numCPU(), budget)
	fmt.Printf("workload %s: %d tasks, %d items, %.0f nominal CPU-s, largest whole task %.2f GiB, budget %.2f GiB, nominal lower bound %.1f s\n",
		*name, len(tasks), s.Items, s.CPUSeconds, float64(s.MaxWhole)/(1<<30), float64(budget)/(1<<30), lb)
	for _, t := range tasks {
		fmt.Printf("  %s: %d items, fixed %s, per item %s, %s/item, whole %.2f GiB, declared at %.1fx\n",
			t.Name, t.Items, workload.Quantity(t.Fixed), workload.Quantity(t.PerItem), t.CPUPerItem, float64(t.Whole())/(1<<30), t.Declared)
	}
	return report.Append(*results, report.Record{Case: "packing-" + *name, Subject: report.SubjectWorkload, F: map[string]float64{
		"cpu_nominal_s": s.CPUSeconds, "mem_byte_s": s.MemorySeconds, "cores": float64(numCPU()),
		"budget": float64(budget), "items": float64(s.Items), "tasks": float64(len(tasks)),
	}})
}

// specHash is the hash the controller gives the manifest's spec: that of
// the parsed, defaulted spec.
func specHash(fileName, text string) (string, error) {
	t, err := v1alpha1.ParseManifest(fileName, []byte(text))
	if t == nil {
		return "", fmt.Errorf("spec hash of %s: %w", fileName, err)
	}
	return v1alpha1.SpecHash(t.Spec), nil
}

func spoolGen(args []string) error {
	fs := flag.NewFlagSet("spool-gen", flag.ContinueOnError)
	kind := fs.String("kind", "trivial", "trivial (runs /bin/true) or done (status Done)")
	n := fs.Int("n", 0, "how many")
	dir := fs.String("dir", "", "spool directory")
	prefix := fs.String("prefix", "t", "name prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("need --dir: %w", errUsage)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("spool-gen: %w", err)
	}
	now := time.Now()
	for i := 0; i < *n; i++ {
		name := fmt.Sprintf("%s-%05d", *prefix, i)
		text := workload.TrivialManifest(name, "/bin/true")
		if *kind == "done" {
			hash, err := specHash(name+".yaml", text)
			if err != nil {
				return err
			}
			text = workload.DoneManifest(name, hash, now)
		}
		if err := os.WriteFile(filepath.Join(*dir, name+".yaml"), []byte(text), 0o644); err != nil {
			return fmt.Errorf("spool-gen: %w", err)
		}
	}
	return nil
}
