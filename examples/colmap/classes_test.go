package colmap_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// classViews is the number of synthetic photos the class examples run on:
// few enough for seconds of COLMAP, enough for the mapper to register them.
const classViews = 16

// exampleTests names, for every manifest under examples/, the test that runs
// it through a real controller and checks its effect.
// TestEveryExampleIsRun fails on a manifest missing here.
var exampleTests = map[string]string{
	"tasks/10-import.yaml":          "cmd/lardon3d-controller TestExamplePipelineRunsInDependencyOrder (synthetic steps: every item done, in dependency order)",
	"tasks/20-features.yaml":        "cmd/lardon3d-controller TestExamplePipelineRunsInDependencyOrder",
	"tasks/30-matching.yaml":        "cmd/lardon3d-controller TestExamplePipelineRunsInDependencyOrder",
	"tasks/40-sfm.yaml":             "cmd/lardon3d-controller TestExamplePipelineRunsInDependencyOrder",
	"colmap/tasks/10-features.yaml": "TestReconstructionThroughController, TestCrashResume",
	"colmap/tasks/20-matching.yaml": "TestReconstructionThroughController, TestCrashResume",
	"colmap/tasks/30-mapper.yaml":   "TestReconstructionThroughController, TestCrashResume",
	"colmap/tasks/40-align.yaml":    "TestReconstructionThroughController, TestCrashResume",
	"tasks/classes/import.yaml":     "TestClassExamples",
	"tasks/classes/exif.yaml":       "TestClassExamples",
	"tasks/classes/thumbnails.yaml": "TestClassExamples",
	"tasks/classes/features.yaml":   "TestClassExamples",
	"tasks/classes/matching.yaml":   "TestClassExamples",
	"tasks/classes/sfm.yaml":        "TestClassExamples",
	"tasks/classes/custom.yaml":     "TestClassExamples",
	"tasks/classes/depthmaps.yaml":  "TestClassExamples, where OpenMVS is installed",
	"tasks/classes/mesh.yaml":       "TestClassExamples, where OpenMVS is installed",
	"tasks/classes/texture.yaml":    "TestClassExamples, where OpenMVS is installed",
}

// TestEveryExampleIsRun keeps exampleTests complete: a manifest added under
// examples/ needs a test that runs it.
func TestEveryExampleIsRun(t *testing.T) {
	root := filepath.Join(repoRoot(t), "examples")
	found := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			rel, _ := filepath.Rel(root, p)
			found[filepath.ToSlash(rel)] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for m := range found {
		if exampleTests[m] == "" {
			t.Errorf("examples/%s is run by no test: run it and check its effect, then name the test in exampleTests", m)
		}
	}
	for m := range exampleTests {
		if !found[m] {
			t.Errorf("exampleTests names examples/%s, which does not exist", m)
		}
	}
}

// TestClassExamples runs the class examples of examples/tasks/classes as
// written through a real controller, on a camera card of synthetic photos,
// and checks what each one leaves behind: the copies, the EXIF files, the
// thumbnails, the images and matches in COLMAP's database, the registered
// model, the reprojected clouds. Only their paths move (/data/castle and
// /media/card1 into a temporary directory) and, on this GPU-less test,
// matching runs on the CPU. The OpenMVS steps (depthmaps, mesh, texture)
// run only where OpenMVS is installed.
func TestClassExamples(t *testing.T) {
	requireColmap(t, "sqlite3", "exiftool", "vipsthumbnail", "python3")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	repo := repoRoot(t)
	controller := controllerBinary(ctx, t, repo)
	work := t.TempDir()
	castle, card, spool := filepath.Join(work, "castle"), filepath.Join(work, "card1"), filepath.Join(work, "spool")
	makeCard(ctx, t, repo, work, card)
	makeCloudsAndScript(t, castle)
	if err := os.MkdirAll(spool, 0o755); err != nil {
		t.Fatal(err)
	}

	classes := []string{"import", "exif", "thumbnails", "features", "matching", "sfm", "custom"}
	if _, err := exec.LookPath("DensifyPointCloud"); err == nil {
		classes = append(classes, "depthmaps", "mesh", "texture")
	} else {
		t.Log("OpenMVS (DensifyPointCloud) is not installed: depthmaps, mesh and texture are not run")
	}
	cpuOnly := strings.NewReplacer("/data/castle", castle, "/media/card1", card, "use_gpu=1", "use_gpu=0", ", gpuMemory: 2Gi}", "}", "    gpuSlots: 1\n", "")
	runArgs := append([]string{"run", "--spool", spool, "--exit-when-done"}, strings.Fields(loadFlags())...)
	began := time.Now()
	var out []byte
	var err error
	env := machineEnv(t)
	// All at once, as a user drops them: the tasks that glob castle/images
	// wait for import (their dependency) to fill it before their items
	// are resolved.
	for _, c := range classes {
		data, err := os.ReadFile(filepath.Join(repo, "examples/tasks/classes", c+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(spool, c+".yaml"), []byte(cpuOnly.Replace(string(data))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := exec.CommandContext(ctx, controller, runArgs...)
	run.Env = env
	out, err = run.CombinedOutput()
	t.Logf("the class examples took %s", time.Since(began).Round(time.Second))
	for _, c := range classes {
		task := readTask(t, filepath.Join(spool, c+".yaml"))
		if p := task.Status.Progress; task.Status.Phase != v1alpha1.PhaseDone || p.ItemsDone != p.ItemsTotal {
			t.Errorf("%s: %s %d/%d items, want Done", c, task.Status.Phase, p.ItemsDone, p.ItemsTotal)
			if log, err := os.ReadFile(task.Status.LogFile); err == nil {
				t.Logf("%s's log ends with:\n%s", c, tail(log, 2000))
			}
		}
	}
	if err != nil {
		t.Fatalf("controller: %v\n%s", err, tail(out, 4000))
	}

	t.Run("import", func(t *testing.T) { countFiles(t, filepath.Join(castle, "images/*.JPG"), classViews) })
	t.Run("exif", func(t *testing.T) {
		files := countFiles(t, filepath.Join(castle, "images/*.exif.json"), classViews)
		for _, f := range files {
			var tags []map[string]any
			if data, err := os.ReadFile(f); err != nil || json.Unmarshal(data, &tags) != nil || len(tags) != 1 || tags[0]["Make"] != "Lardon" {
				t.Errorf("%s: want one object with Make Lardon, got %v %v", f, tags, err)
			}
		}
	})
	t.Run("thumbnails", func(t *testing.T) { countFiles(t, filepath.Join(castle, "thumbs/*.jpg"), classViews) })
	db := filepath.Join(castle, "colmap.db")
	t.Run("features", func(t *testing.T) {
		if n := sqliteCount(ctx, t, db, "SELECT count(*) FROM images"); n != classViews {
			t.Errorf("the database holds %d images, want %d", n, classViews)
		}
		if n := sqliteCount(ctx, t, db, "SELECT count(*) FROM keypoints WHERE rows > 100"); n != classViews {
			t.Errorf("%d images with over 100 keypoints, want %d", n, classViews)
		}
	})
	t.Run("matching", func(t *testing.T) {
		if n := sqliteCount(ctx, t, db, "SELECT count(*) FROM two_view_geometries WHERE rows >= 15"); n < classViews {
			t.Errorf("%d image pairs with 15 or more inlier matches, want at least %d", n, classViews)
		}
	})
	t.Run("sfm", func(t *testing.T) {
		// The mapper's choices vary from run to run on these synthetic
		// views (16 of 16 registered most often, 13 seen): the example
		// works when a model registers most of them; one that silently
		// does nothing registers none.
		if n := registeredImages(ctx, t, filepath.Join(castle, "sparse/0")); n*2 < classViews {
			t.Errorf("the model registers %d of %d images, want at least half", n, classViews)
		}
	})
	t.Run("custom", func(t *testing.T) { countFiles(t, filepath.Join(castle, "clouds/*.2154.ply"), 3) })
}

// makeCard renders classViews photos into card/DCIM/100LARDN as a camera
// names them (.JPG), with the EXIF tags a camera writes.
func makeCard(ctx context.Context, t *testing.T, repo, work, card string) {
	t.Helper()
	bin, views := filepath.Join(work, "bin"), filepath.Join(work, "views")
	mustRun(ctx, t, repo, "go", "build", "-o", bin+"/", "./examples/colmap/genviews")
	mustRun(ctx, t, repo, filepath.Join(bin, "genviews"), "--n", strconv.Itoa(classViews), "--out", views, "--seed", "2")
	dcim := filepath.Join(card, "DCIM", "100LARDN")
	if err := os.MkdirAll(dcim, 0o755); err != nil {
		t.Fatal(err)
	}
	jpgs, _ := filepath.Glob(filepath.Join(views, "images", "*.jpg"))
	if len(jpgs) != classViews {
		t.Fatalf("genviews wrote %d views, want %d", len(jpgs), classViews)
	}
	for _, j := range jpgs {
		data, err := os.ReadFile(j)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dcim, strings.TrimSuffix(filepath.Base(j), ".jpg")+".JPG"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustRun(ctx, t, dcim, "exiftool", "-q", "-overwrite_original", "-Make=Lardon", "-Model=Synth", "-FocalLength=4.5", ".")
}

// makeCloudsAndScript writes custom.yaml's inputs: three point clouds and,
// in place of the user's reprojection script, one that writes NAME.2154.ply
// beside each cloud of --list.
func makeCloudsAndScript(t *testing.T, castle string) {
	t.Helper()
	files := map[string]string{
		"scripts/reproject.py": `import argparse, pathlib
p = argparse.ArgumentParser()
p.add_argument("--epsg", required=True)
p.add_argument("--list", required=True)
a = p.parse_args()
for line in pathlib.Path(a.list).read_text().splitlines():
    src = pathlib.Path(line)
    src.with_suffix("." + a.epsg + ".ply").write_bytes(src.read_bytes())
`,
	}
	for _, b := range []string{"a", "b", "c"} {
		files["clouds/block-"+b+".ply"] = "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 0 0\n"
	}
	for name, text := range files {
		p := filepath.Join(castle, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// countFiles asserts that pattern matches want files, and returns them.
func countFiles(t *testing.T, pattern string, want int) []string {
	t.Helper()
	files, _ := filepath.Glob(pattern)
	if len(files) != want {
		t.Errorf("%s: %d files, want %d", pattern, len(files), want)
	}
	return files
}

// sqliteCount runs a count query on db with the sqlite3 command.
func sqliteCount(ctx context.Context, t *testing.T, db, query string) int {
	t.Helper()
	out, err := exec.CommandContext(ctx, "sqlite3", "-readonly", db, query).CombinedOutput()
	n, convErr := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || convErr != nil {
		t.Fatalf("sqlite3 %s %q: %v\n%s", db, query, err, out)
	}
	return n
}

// registeredImages is the number of images colmap model_analyzer counts in
// the model at dir.
func registeredImages(ctx context.Context, t *testing.T, dir string) int {
	t.Helper()
	out, err := exec.CommandContext(ctx, "colmap", "model_analyzer", "--path", dir).CombinedOutput()
	m := regexp.MustCompile(`Registered images: (\d+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("colmap model_analyzer --path %s: %v\n%s", dir, err, out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}
