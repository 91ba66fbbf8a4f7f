package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/ with the output")

// golden compares got with testdata/NAME.golden (rewritten under -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

// getFixture is a spool of tasks that never start, so that every column
// is the same from run to run: two paused tasks, one waiting for a
// dependency that does not exist, one refused by validation and one file
// that is not YAML. They are written one at a time, so that their queue
// order (zeta, alpha, orphan) is not their name order.
var getFixture = []struct{ file, body string }{
	{"zeta.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  labels: {app: colmap, stage: features}
spec:
  paused: true
  command: [sh, -c, "true"]
  items: {count: 2}
`},
	{"alpha.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  labels: {app: colmap, stage: mesh}
spec:
  paused: true
  command: [sh, -c, "true"]
  items: {count: 3}
`},
	{"orphan.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  labels: {app: other}
spec:
  dependsOn: [nosuch]
  command: [sh, -c, "true"]
  items: {count: 1}
`},
	{"bad.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata:
  labels: {app: colmap}
spec:
  command: [sh, -c, "true"]
  items: {count: 1}
  resources: {threads: 0, minThreads: 5}
`},
}

func TestGetSelectsSortsAndFormats(t *testing.T) {
	spool := newSpool(t)
	startController(t, spool)
	for _, f := range getFixture {
		path := writeManifest(t, spool, f.file, f.body)
		eventually(t, 20*time.Second, f.file+" to get a status", func() bool { return phaseOf(t, path) != "" })
	}
	writeManifest(t, spool, "broken.yaml", "apiVersion: [unclosed\n")

	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"get/default", nil},
		{"get/sort-by-name", []string{"--sort-by", "name"}},
		{"get/sort-by-phase", []string{"--sort-by", "phase"}},
		{"get/selector", []string{"-l", "app=colmap,stage!=mesh"}},
		{"get/selector-set", []string{"-l", "stage in (features,mesh)", "--sort-by", "name"}},
		{"get/wide", []string{"-o", "wide"}},
		{"get/wide-no-headers", []string{"-o", "wide", "--no-headers", "-l", "app"}},
		{"get/no-headers", []string{"--no-headers"}},
		{"get/name", []string{"-o", "name"}},
		{"get/name-selector", []string{"-o", "name", "-l", "app=colmap", "--sort-by", "name"}},
		{"get/one", []string{"alpha", "-o", "wide"}},
	} {
		out, code := runCLI(t, append([]string{"get", "--spool", spool}, c.args...)...)
		if code != 0 {
			t.Errorf("get %s: exit %d: %s", strings.Join(c.args, " "), code, out)
			continue
		}
		golden(t, c.golden, ageless(out))
	}
}

// ageless replaces the AGE cells of get's table (the sixth column, with
// headers or without) by <age>, and the padding by three spaces: a task's
// age counts from its creation, so it differs from run to run.
func ageless(out string) string {
	cells := regexp.MustCompile(`\S+(?: \S+)*`)
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		f := cells.FindAllString(line, -1)
		if len(f) > 6 && regexp.MustCompile(`^([0-9]+[smhd])+$`).MatchString(f[5]) {
			f[5] = "<age>"
		}
		lines[i] = strings.Join(f, "   ")
	}
	return strings.Join(lines, "\n")
}

func TestGetRefusesWhatIsNotASpoolAndBadFlags(t *testing.T) {
	dir := t.TempDir()
	file := writeManifest(t, dir, "plain", "")
	missing := filepath.Join(dir, "missing")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--spool", missing}, 1, fmt.Sprintf("error: spool %s: no such directory (--spool or LARDON3D_SPOOL)\n", missing)},
		{[]string{"--spool", file}, 1, fmt.Sprintf("error: spool %s: not a directory (--spool or LARDON3D_SPOOL)\n", file)},
		{[]string{"--spool", dir, "-o", "table"}, 2, "error: -o \"table\": want wide, name, json, yaml, jsonpath=TEMPLATE, custom-columns=SPEC or custom-columns-file=FILE\n"},
		{[]string{"--spool", dir, "-o", "jsonpath={.items[*"}, 2, "error: -o jsonpath: error parsing \"{.items[*\": unterminated array\n"},
		{[]string{"--spool", dir, "-o", "custom-columns=NAME"}, 2, "error: -o custom-columns: unexpected spec \"NAME\", expected <header>:<json-path-expr>\n"},
		{[]string{"--spool", dir, "a", "-l", "x=y"}, 2, "error: a name cannot be given with a selector (-l)\n"},
		{[]string{"--spool", dir, "--sort-by", "size"}, 2, "error: --sort-by \"size\": want queue, name, age or phase\n"},
		{[]string{"--spool", dir, "-l", "a in b"}, 2, "error: -l \"a in b\": unable to parse requirement: found 'b' expected: '('\n"},
		{[]string{"--spool", dir, "--no-headers"}, 0, ""},
		{[]string{"--spool", dir, "-o", "json"}, 0, "{\n  \"items\": []\n}\n"},
	} {
		out, code := runCLI(t, append([]string{"get"}, c.args...)...)
		if code != c.code || out != c.want {
			t.Errorf("get %s: exit %d, output %q; want exit %d, %q", strings.Join(c.args, " "), code, out, c.code, c.want)
		}
	}
}

// TestSortByPhaseFollowsTheLifecycle: --sort-by phase lists the phases
// in the order a task lives them (the README's lifecycle), not by name;
// the files get shows as Invalid come after every task.
func TestSortByPhaseFollowsTheLifecycle(t *testing.T) {
	var files []listing.File
	for i, p := range []string{"Rejected", "Failed", "Done", "Paused", "Running", "Reserved", "Pending", ""} {
		task := &v1alpha1.Task{}
		task.Metadata.Name = fmt.Sprintf("t%d", i)
		task.Status.Phase = v1alpha1.Phase(p)
		files = append(files, taskFile(task.Metadata.Name+".yaml", task))
	}
	files = append(files, listing.File{Path: "/spool/broken.yaml", Err: errors.New("unparseable")})
	slices.Reverse(files)
	sortFiles(files, "phase")
	var got []string
	for _, f := range files {
		got = append(got, f.Phase())
	}
	want := "New Pending Reserved Running Paused Done Failed Rejected Invalid"
	if strings.Join(got, " ") != want {
		t.Errorf("--sort-by phase: %v, want %s", got, want)
	}
}

// TestSortFilesByAge: age counts from the creation time, else (a status
// an older controller wrote) the start time; oldest first, unknown last.
func TestSortFilesByAge(t *testing.T) {
	at := func(name string, seq int64, start, created int) listing.File {
		task := &v1alpha1.Task{}
		task.Metadata.Name = name
		task.Status.QueueSeq = seq
		if start > 0 {
			ts := metav1.NewTime(time.Unix(int64(start), 0))
			task.Status.StartTime = &ts
		}
		if created > 0 {
			tc := metav1.NewTime(time.Unix(int64(created), 0))
			task.Status.CreationTime = &tc
		}
		return taskFile(name+".yaml", task)
	}
	// f was created first but started last: by age it comes first.
	files := []listing.File{at("a", 3, 0, 0), at("b", 1, 200, 0), at("c", 2, 100, 0), at("d", 0, 0, 0), at("e", 4, 100, 0), at("f", 5, 300, 50)}
	for by, want := range map[string]string{
		"":      "b c a e f d",
		"queue": "b c a e f d",
		"age":   "f c e b a d",
		"name":  "a b c d e f",
	} {
		sortFiles(files, by)
		var got []string
		for _, f := range files {
			got = append(got, f.Name())
		}
		if strings.Join(got, " ") != want {
			t.Errorf("sort by %q: %v, want %s", by, got, want)
		}
	}
}
