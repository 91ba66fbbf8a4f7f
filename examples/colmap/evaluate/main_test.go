package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const s2 = 0.7071067811865476 // sin 45°

func TestCentreInvertsPose(t *testing.T) {
	// 90° about Z: R = [[0,-1,0],[1,0,0],[0,0,1]]. For C = (1,2,3), t = -R C.
	c := centre(s2, 0, 0, s2, vec3{2, -1, -3})
	if d := math.Abs(c[0]-1) + math.Abs(c[1]-2) + math.Abs(c[2]-3); d > 1e-12 {
		t.Errorf("centre = %v, want (1, 2, 3)", c)
	}
	// An unnormalised quaternion means the same rotation.
	c = centre(2*s2, 0, 0, 2*s2, vec3{2, -1, -3})
	if d := math.Abs(c[0]-1) + math.Abs(c[1]-2) + math.Abs(c[2]-3); d > 1e-12 {
		t.Errorf("centre of scaled quaternion = %v, want (1, 2, 3)", c)
	}
}

// imagesTxt writes images.txt for identity rotations: t = -C.
func imagesTxt(centres map[string]vec3, emptyPoints string) string {
	var b strings.Builder
	b.WriteString("# Image list with two lines of data per image:\n#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n")
	id := 1
	for name, c := range centres {
		fmt.Fprintf(&b, "%d 1 0 0 0 %g %g %g 1 %s\n", id, -c[0], -c[1], -c[2], name)
		if name == emptyPoints {
			b.WriteString("\n")
		} else {
			b.WriteString("10.5 20.5 -1 30.5 40.5 7\n")
		}
		id++
	}
	return b.String()
}

func TestParseImagesByName(t *testing.T) {
	want := map[string]vec3{"view_001.jpg": {1, 2, 3}, "view_000.jpg": {-4, 5, 0.5}, "view_002.jpg": {0, 0, 1}}
	got, err := parseImages(strings.NewReader(imagesTxt(want, "view_000.jpg")))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d images, want %d: %v", len(got), len(want), got)
	}
	for name, c := range want {
		if got[name] != c {
			t.Errorf("%s: centre %v, want %v", name, got[name], c)
		}
	}
	if _, err := parseImages(strings.NewReader("1 1 0 0 0 1 2 view.jpg\n")); err == nil {
		t.Error("a short image line was accepted")
	}
}

func TestScore(t *testing.T) {
	gt := map[string]vec3{"a": {8, 0, 5}, "b": {0, 8, 5}, "c": {-8, 0, 5}, "d": {0, -8, 5}}
	got := map[string]vec3{"a": {8.4, 0, 5}, "b": {0, 8, 5.8}, "c": {-8, 0, 5}}
	r, err := score(gt, got, 42, 8)
	if err != nil {
		t.Fatal(err)
	}
	if r.Registered != 3 || r.Total != 4 || r.Points != 42 {
		t.Errorf("score = %+v, want 3/4 registered, 42 points", r)
	}
	if want := (0.4 + 0.8) / 3 / 8; math.Abs(r.MeanError-want) > 1e-12 || math.Abs(r.MaxError-0.1) > 1e-12 {
		t.Errorf("errors mean %g max %g, want %g and 0.1", r.MeanError, r.MaxError, want)
	}
	if _, err := score(gt, map[string]vec3{"zz": {}}, 0, 8); err == nil {
		t.Error("an image missing from the ground truth was accepted")
	}
	if r, _ := score(gt, nil, 0, 8); !math.IsInf(r.MeanError, 1) {
		t.Errorf("no registered image: mean error %g, want +Inf", r.MeanError)
	}
}

// writeCase writes a model, ground truth and scene.json into a temp dir.
func writeCase(t *testing.T, gt, model map[string]vec3) string {
	t.Helper()
	dir := t.TempDir()
	var g strings.Builder
	for name, c := range gt {
		fmt.Fprintf(&g, "%s %g %g %g\n", name, c[0], c[1], c[2])
	}
	files := map[string]string{
		"gt.txt":             g.String(),
		"scene.json":         `{"views": 4, "radius": 8}`,
		"model/images.txt":   imagesTxt(model, ""),
		"model/points3D.txt": "# 3D point list\n1 0 0 0 1 2 3 0.1 1 1\n2 0 0 0 1 2 3 0.1 1 1\n",
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRunThresholds(t *testing.T) {
	gt := map[string]vec3{"a": {8, 0, 5}, "b": {0, 8, 5}, "c": {-8, 0, 5}, "d": {0, -8, 5}}
	args := func(dir string) []string {
		return []string{"--model", filepath.Join(dir, "model"), "--gt", filepath.Join(dir, "gt.txt"), "--scene", filepath.Join(dir, "scene.json")}
	}
	var out bytes.Buffer
	good := writeCase(t, gt, map[string]vec3{"a": {8.08, 0, 5}, "b": {0, 8, 5}, "c": {-8, 0, 5}, "d": {0, -8, 5}})
	if err := run(args(good), &out, io.Discard); err != nil {
		t.Fatalf("good model: %v", err)
	}
	if want := "registered 4/4, points 2, mean camera-centre error 0.25% of radius"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("output %q, want prefix %q", out.String(), want)
	}
	missing := writeCase(t, gt, map[string]vec3{"a": {8, 0, 5}, "b": {0, 8, 5}, "c": {-8, 0, 5}})
	if err := run(args(missing), io.Discard, io.Discard); !errors.Is(err, errBelowThreshold) {
		t.Errorf("3 of 4 registered: err %v, want errBelowThreshold", err)
	}
	far := writeCase(t, gt, map[string]vec3{"a": {9.6, 0, 5}, "b": {0, 8, 5}, "c": {-8, 0, 5}, "d": {0, -8, 5.1}})
	if err := run(args(far), io.Discard, io.Discard); !errors.Is(err, errBelowThreshold) {
		t.Errorf("mean error 5.3%%: err %v, want errBelowThreshold", err)
	}
	if err := run([]string{"--model", "x"}, io.Discard, io.Discard); err == nil || errors.Is(err, errBelowThreshold) {
		t.Errorf("missing flags: err %v, want a usage error", err)
	}
}
