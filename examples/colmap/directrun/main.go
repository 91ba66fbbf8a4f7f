// Command directrun runs a spool of Task manifests by itself, one batch after
// another, without the governor: a fallback for trying the COLMAP pipeline
// (and a second reading of the manifests) where lardon3d-controller is not
// built. It is NOT the controller: no admission, no status written back, no
// crash recovery, no concurrency.
//
// Usage: directrun --spool DIR [--threads N]
//
// Manifests (*.yaml) run in dependency order (ties by file name). Each batch
// gets the controller's batch environment: LARDON3D_TASK, LARDON3D_BATCH_INDEX,
// LARDON3D_BATCH_START, LARDON3D_BATCH_SIZE, LARDON3D_ITEMS_TOTAL,
// LARDON3D_ITEMS_FILE (absolute paths for items.glob and items.files, indices
// for items.count), LARDON3D_THREADS and OMP_NUM_THREADS; $(VAR) in the
// command expands like Kubernetes ($$ escapes).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "directrun:", err)
		os.Exit(1)
	}
}

// task is a parsed manifest with its file.
type task struct {
	file string
	t    v1alpha1.Task
}

func run(args []string) error {
	fs := flag.NewFlagSet("directrun", flag.ContinueOnError)
	spool := fs.String("spool", "", "directory of the manifests")
	threads := fs.Int("threads", 0, "cap on threads per batch (0: the manifest's wish)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *spool == "" {
		return errors.New("--spool is required")
	}
	abs, err := filepath.Abs(*spool)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	tasks, err := load(abs)
	if err != nil {
		return err
	}
	order, err := topo(tasks)
	if err != nil {
		return err
	}
	for _, tk := range order {
		if err := runTask(abs, tk, int32(*threads)); err != nil {
			return fmt.Errorf("task %s: %w", tk.t.Metadata.Name, err)
		}
	}
	return nil
}

func load(spool string) ([]task, error) {
	files, err := filepath.Glob(filepath.Join(spool, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("list spool: %w", err)
	}
	slices.Sort(files)
	var tasks []task
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read manifest: %w", err)
		}
		var t v1alpha1.Task
		if err := yaml.UnmarshalStrict(data, &t); err != nil {
			return nil, fmt.Errorf("parse %s: %w", f, err)
		}
		if t.Metadata.Name == "" {
			t.Metadata.Name = strings.TrimSuffix(filepath.Base(f), ".yaml")
		}
		tasks = append(tasks, task{file: f, t: t})
	}
	return tasks, nil
}

// topo orders tasks so that dependencies come first, keeping file order
// among independent tasks.
func topo(tasks []task) ([]task, error) {
	byName := map[string]int{}
	for i, tk := range tasks {
		byName[tk.t.Metadata.Name] = i
	}
	state := make([]int, len(tasks)) // 0 new, 1 visiting, 2 done
	var out []task
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 1:
			return fmt.Errorf("dependency cycle through %s", tasks[i].t.Metadata.Name)
		case 2:
			return nil
		}
		state[i] = 1
		for _, d := range tasks[i].t.Spec.DependsOn {
			j, ok := byName[d]
			if !ok {
				return fmt.Errorf("task %s depends on missing task %s", tasks[i].t.Metadata.Name, d)
			}
			if err := visit(j); err != nil {
				return err
			}
		}
		state[i] = 2
		out = append(out, tasks[i])
		return nil
	}
	for i := range tasks {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func items(dir string, it v1alpha1.Items) ([]string, error) {
	switch {
	case it.Count != nil:
		out := make([]string, *it.Count)
		for i := range out {
			out[i] = strconv.Itoa(i)
		}
		return out, nil
	case it.Glob != "":
		m, err := v1alpha1.Glob(it.Glob, dir)
		if err != nil {
			return nil, fmt.Errorf("items.glob: %w", err)
		}
		slices.Sort(m)
		return m, nil
	default:
		out := make([]string, len(it.Files))
		for i, f := range it.Files {
			if !filepath.IsAbs(f) {
				f = filepath.Join(dir, f)
			}
			out[i] = f
		}
		return out, nil
	}
}

func runTask(spool string, tk task, threadCap int32) error {
	spec := tk.t.Spec
	dir := spec.WorkingDir
	if dir == "" {
		dir = spool
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(spool, dir)
	}
	all, err := items(dir, spec.Items)
	if err != nil {
		return err
	}
	if len(all) == 0 {
		return errors.New("no items")
	}
	batch := int(spec.Resources.Batch.Max)
	if batch <= 0 {
		batch = len(all)
	}
	threads := max(spec.Resources.Threads, 1)
	if threadCap > 0 {
		threads = min(threads, threadCap)
	}
	for index, start := 0, 0; start < len(all); index, start = index+1, start+batch {
		end := min(start+batch, len(all))
		list, err := os.CreateTemp("", "items-*.txt")
		if err != nil {
			return fmt.Errorf("items file: %w", err)
		}
		_, werr := list.WriteString(strings.Join(all[start:end], "\n") + "\n")
		if err := errors.Join(werr, list.Close()); err != nil {
			return fmt.Errorf("items file: %w", err)
		}
		env := map[string]string{
			"LARDON3D_TASK":        tk.t.Metadata.Name,
			"LARDON3D_BATCH_INDEX": strconv.Itoa(index),
			"LARDON3D_BATCH_START": strconv.Itoa(start),
			"LARDON3D_BATCH_SIZE":  strconv.Itoa(end - start),
			"LARDON3D_ITEMS_TOTAL": strconv.Itoa(len(all)),
			"LARDON3D_ITEMS_FILE":  list.Name(),
			"LARDON3D_THREADS":     strconv.Itoa(int(threads)),
			"OMP_NUM_THREADS":      strconv.Itoa(int(threads)),
		}
		for _, e := range spec.Env {
			env[e.Name] = expand(e.Value, env)
		}
		argv := make([]string, len(spec.Command))
		for i, a := range spec.Command {
			argv[i] = expand(a, env)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		began := time.Now()
		fmt.Fprintf(os.Stderr, "directrun: %s batch %d items [%d,%d) threads %d\n", tk.t.Metadata.Name, index, start, end, threads)
		err = cmd.Run()
		os.Remove(list.Name())
		if err != nil {
			return fmt.Errorf("batch %d: %w", index, err)
		}
		fmt.Fprintf(os.Stderr, "directrun: %s batch %d done in %.1fs\n", tk.t.Metadata.Name, index, time.Since(began).Seconds())
	}
	return nil
}

var varRef = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces $(VAR) with env's value, leaving unknown references as
// they are, and $$ with $, like Kubernetes.
func expand(s string, env map[string]string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}
