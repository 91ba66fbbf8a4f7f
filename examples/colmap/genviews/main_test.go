package main

import (
	"bytes"
	"encoding/json"
	"image/jpeg"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func small(t *testing.T, seed uint64) config {
	t.Helper()
	return config{n: 4, width: 96, height: 72, seed: seed, out: t.TempDir(),
		radius: 8, camZ: 5, boxes: 6, quality: 95, samples: 2}
}

func readOutputs(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSameSeedSameBytes(t *testing.T) {
	a, b := small(t, 7), small(t, 7)
	if err := generate(a); err != nil {
		t.Fatal(err)
	}
	if err := generate(b); err != nil {
		t.Fatal(err)
	}
	fa, fb := readOutputs(t, a.out), readOutputs(t, b.out)
	if len(fa) != 4+2 {
		t.Fatalf("want 4 views, gt.txt and scene.json, got %d files", len(fa))
	}
	for name, data := range fa {
		if !bytes.Equal(data, fb[name]) {
			t.Errorf("%s differs between two runs with the same seed", name)
		}
	}
}

func TestOtherSeedOtherViews(t *testing.T) {
	a, b := small(t, 1), small(t, 2)
	if err := generate(a); err != nil {
		t.Fatal(err)
	}
	if err := generate(b); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(readOutputs(t, a.out)["images/view_000.jpg"], readOutputs(t, b.out)["images/view_000.jpg"]) {
		t.Error("seeds 1 and 2 rendered the same view")
	}
}

// TestViewsAreTextured checks what SIFT needs: a full-size image, high
// contrast, and fine detail (large differences between neighbouring pixels).
func TestViewsAreTextured(t *testing.T) {
	c := small(t, 3)
	c.width, c.height, c.n = 160, 120, 2
	if err := generate(c); err != nil {
		t.Fatal(err)
	}
	for i := range c.n {
		f, err := os.Open(filepath.Join(c.out, "images", viewName(i)))
		if err != nil {
			t.Fatal(err)
		}
		img, err := jpeg.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() != 160 || b.Dy() != 120 {
			t.Fatalf("view %d is %dx%d, want 160x120", i, b.Dx(), b.Dy())
		}
		lum := func(x, y int) float64 {
			r, g, b, _ := img.At(x, y).RGBA()
			return (0.299*float64(r) + 0.587*float64(g) + 0.114*float64(b)) / 257
		}
		var sum, sum2, grad float64
		n := 0
		for y := range 120 {
			for x := range 159 {
				l := lum(x, y)
				sum += l
				sum2 += l * l
				grad += math.Abs(lum(x+1, y) - l)
				n++
			}
		}
		mean := sum / float64(n)
		std := math.Sqrt(sum2/float64(n) - mean*mean)
		if std < 30 {
			t.Errorf("view %d: luminance std %.1f, want >= 30 (too flat for SIFT)", i, std)
		}
		if g := grad / float64(n); g < 10 {
			t.Errorf("view %d: mean horizontal gradient %.1f, want >= 10 (too little fine detail)", i, g)
		}
	}
}

func TestGroundTruthAndSceneInfo(t *testing.T) {
	c := small(t, 1)
	if err := generate(c); err != nil {
		t.Fatal(err)
	}
	gt, err := os.ReadFile(filepath.Join(c.out, "gt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(gt)), "\n")
	if len(lines) != c.n {
		t.Fatalf("gt.txt has %d lines, want %d", len(lines), c.n)
	}
	for i, line := range lines {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != viewName(i) {
			t.Fatalf("gt.txt line %d = %q, want %q X Y Z", i, line, viewName(i))
		}
		var p [3]float64
		for k := range 3 {
			if p[k], err = strconv.ParseFloat(f[k+1], 64); err != nil {
				t.Fatal(err)
			}
		}
		if r := math.Hypot(p[0], p[1]); math.Abs(r-c.radius) > 1e-5 || math.Abs(p[2]-c.camZ) > 1e-5 {
			t.Errorf("view %d at radius %.6f height %.6f, want %g and %g", i, r, p[2], c.radius, c.camZ)
		}
	}
	data, err := os.ReadFile(filepath.Join(c.out, "scene.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info sceneInfo
	if err := json.Unmarshal(data, &info); err != nil {
		t.Fatal(err)
	}
	if info.Radius != c.radius || info.Views != c.n || math.Abs(info.Focal-115.2) > 1e-9 {
		t.Errorf("scene.json = %+v, want radius %g, %d views, focal %g", info, c.radius, c.n, 1.2*96)
	}
}

// TestCamerasLookAtTarget projects the target through every camera: it must
// land on the image centre, in front of the camera.
func TestCamerasLookAtTarget(t *testing.T) {
	for _, cam := range cameras(config{n: 24, width: 320, height: 240, radius: 8, camZ: 5}) {
		d := target.sub(cam.centre)
		z := d.dot(cam.forward)
		u := cam.cx + cam.focal*d.dot(cam.right)/z
		v := cam.cy + cam.focal*d.dot(cam.down)/z
		if z <= 0 || math.Abs(u-160) > 1e-9 || math.Abs(v-120) > 1e-9 {
			t.Errorf("target projects to (%.3f, %.3f) depth %.3f, want (160, 120) in front", u, v, z)
		}
		// The ground below the target is lower in the image (v grows downwards).
		g := vec3{0, 0, 0}.sub(cam.centre)
		if vg := cam.cy + cam.focal*g.dot(cam.down)/g.dot(cam.forward); vg <= 120 {
			t.Errorf("ground below the target at v=%.1f, want below the centre", vg)
		}
	}
}

func TestFlags(t *testing.T) {
	if err := run([]string{"--n", "2"}, io.Discard); err == nil {
		t.Error("missing --out accepted")
	}
	if err := run([]string{"--out", t.TempDir(), "--width", "4"}, io.Discard); err == nil {
		t.Error("--width 4 accepted")
	}
	dir := t.TempDir()
	if err := run([]string{"--out", dir, "--n", "2", "--width", "32", "--height", "24"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "images", "view_001.jpg")); err != nil {
		t.Error(err)
	}
}
