package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const validManifest = `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: %NAME%}
spec:
  command: ["true"]
  items: {count: 1}
`

func TestValidateWarnsOfWhatWillFailAtRunTime(t *testing.T) {
	spool := newSpool(t)
	if err := os.MkdirAll(filepath.Join(spool, "images", "day1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spool, "images", "day1", "IMG_1.JPG"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, spool, "features.yaml", strings.ReplaceAll(validManifest, "%NAME%", "features"))
	writeManifest(t, spool, "camera.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: ["true"]
  items: {glob: "images/**/*.{jpg,JPG}"}
`)
	writeManifest(t, spool, "broken.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
spec:
  command: [colmapp, feature_extractor]
  workingDir: nowhere
  dependsOn: [featurs]
  items: {glob: "*.tif"}
  resources:
    perThread: {memory: 100}
`)
	writeManifest(t, spool, "zz-bad.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  comand: [x]\n  items: {count: 1}\n")
	out, code := runCLI(t, "validate", spool)
	out = strings.ReplaceAll(out, spool, "SPOOL")
	want := `SPOOL/broken.yaml: valid, 4 warning(s)
  warning: spec.resources.perThread.memory: is only 100 bytes, likely a number missing its unit (did you mean 100Mi or 100Gi?)
  warning: spec.workingDir: SPOOL/nowhere does not exist or is not a directory; every batch would fail to start
  warning: spec.command[0]: command "colmapp" not found in PATH; every batch would fail (CommandNotFound)
  warning: spec.dependsOn: no task "featurs" among the manifests checked or beside them; the task would wait (DependencyMissing); did you mean "features"?
SPOOL/camera.yaml: valid
SPOOL/features.yaml: valid
SPOOL/zz-bad.yaml: invalid
  line 3: spec.command: is required
  line 4: spec.comand: unknown field, did you mean command?
error: 1 of 4 manifests invalid
`
	if code != 1 || out != want {
		t.Fatalf("validate DIR: exit %d\n%s\nwant exit 1 and\n%s", code, out, want)
	}
	// Warnings alone exit 0; a glob matching nothing is one of them.
	out, code = runCLI(t, "validate", filepath.Join(spool, "features.yaml"), filepath.Join(spool, "camera.yaml"))
	if code != 0 || strings.Contains(out, "warning") {
		t.Fatalf("valid files: exit %d\n%s", code, out)
	}
	nothing := writeManifest(t, t.TempDir(), "none.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {glob: \"*.{jpg,JPG}\"}\n")
	out, code = runCLI(t, "validate", nothing)
	if code != 0 || !strings.Contains(out, `warning: spec.items.glob: "*.{jpg,JPG}" matches nothing in `) {
		t.Fatalf("glob matching nothing: exit %d\n%s", code, out)
	}
}

func TestValidateReadsStandardInputAndChecksDependsOnAcrossFiles(t *testing.T) {
	a := writeManifest(t, t.TempDir(), "a.yaml", strings.ReplaceAll(validManifest, "%NAME%", "extract"))
	// From stdin, depending on a task of a file given beside it.
	cmd := exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), "validate", a, "-")
	cmd.Stdin = strings.NewReader(strings.ReplaceAll(validManifest, "%NAME%", "match") + "  dependsOn: [extract]\n")
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	if err != nil || out != a+": valid\n<stdin>: valid\n" {
		t.Fatalf("validate FILE -: %v\n%s", err, out)
	}
	cmd = exec.Command(filepath.Join(binaries(t), "lardon3d-controller"), "validate", "-")
	cmd.Stdin = strings.NewReader("kind: [")
	outb, _ = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 1 || !strings.HasPrefix(string(outb), "<stdin>: invalid\n  not parseable YAML") {
		t.Fatalf("validate - (broken): exit %d\n%s", cmd.ProcessState.ExitCode(), outb)
	}
	// Two files with one task name.
	dir := t.TempDir()
	writeManifest(t, dir, "one.yaml", strings.ReplaceAll(validManifest, "%NAME%", "same"))
	writeManifest(t, dir, "two.yaml", strings.ReplaceAll(validManifest, "%NAME%", "same"))
	out, code := runCLI(t, "validate", dir)
	if code != 0 || strings.Count(out, `metadata.name "same" is also the name of `) != 2 {
		t.Fatalf("duplicate names: exit %d\n%s", code, out)
	}
	if out, code := runCLI(t, "validate", t.TempDir()); code != 2 || !strings.Contains(out, "no manifests") {
		t.Fatalf("empty directory: exit %d\n%s", code, out)
	}
}

// A manifest larger than the controller reads (a 9 MB inline list took
// validate minutes and gigabytes) is refused by validate as by the
// controller, before any parsing.
func TestValidateRefusesAManifestTooLargeForTheController(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString(strings.ReplaceAll(validManifest, "%NAME%", "huge"))
	b.WriteString("  env:\n")
	for i := 0; b.Len() <= 2<<20; i++ {
		b.WriteString("  - {name: V" + strings.Repeat("X", 40) + ", value: '" + strings.Repeat("y", 200) + "'}\n")
	}
	path := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, "validate", path)
	if code == 0 || !strings.Contains(out, "larger than 1048576 bytes") {
		t.Errorf("validate of a 2 MiB manifest: exit %d\n%s", code, tail(out, 2000))
	}
}
