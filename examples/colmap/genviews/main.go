// Command genviews renders a synthetic photogrammetry data set: a ground
// square and a few upright boxes covered in a dense, random, multi-scale
// texture, seen by N pinhole cameras on a circle around the scene, looking at
// its centre from above.
//
// It writes, under --out:
//
//	images/view_000.jpg ...  the views (JPEG)
//	gt.txt                   "view_000.jpg X Y Z" per line: the true camera
//	                         centres, as colmap model_aligner --ref_images_path reads
//	scene.json               the circle's radius and height, focal length, size, seed
//
// The output is a pure function of the flags (same seed, same bytes).
// Standard library only.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// config is what the flags set.
type config struct {
	n, width, height int
	seed             uint64
	out              string
	radius, camZ     float64
	boxes            int
	quality          int
	samples          int
}

// sceneInfo is written to scene.json.
type sceneInfo struct {
	Views   int     `json:"views"`
	Width   int     `json:"width"`
	Height  int     `json:"height"`
	Seed    uint64  `json:"seed"`
	Radius  float64 `json:"radius"`
	CameraZ float64 `json:"cameraZ"`
	Focal   float64 `json:"focal"`
}

// camera is a pinhole camera; pixel (u, v) with v down.
type camera struct {
	centre               vec3
	forward, right, down vec3
	focal, cx, cy        float64
	width, height        int
}

// target is the point every camera looks at.
var target = vec3{0, 0, 0.4}

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "genviews:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("genviews", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.n, "n", 24, "number of views")
	fs.IntVar(&c.width, "width", 320, "image width in pixels")
	fs.IntVar(&c.height, "height", 240, "image height in pixels")
	fs.Uint64Var(&c.seed, "seed", 1, "random seed of the scene and its texture")
	fs.StringVar(&c.out, "out", "", "output directory (required)")
	fs.Float64Var(&c.radius, "radius", 8, "radius of the camera circle, world units")
	fs.Float64Var(&c.camZ, "camera-z", 5, "height of the cameras above the ground")
	fs.IntVar(&c.boxes, "boxes", 6, "number of boxes")
	fs.IntVar(&c.quality, "quality", 95, "JPEG quality")
	fs.IntVar(&c.samples, "samples", 2, "supersampling per pixel axis")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.out == "" {
		return errors.New("--out is required")
	}
	if c.n < 1 || c.width < 16 || c.height < 16 || c.samples < 1 {
		return fmt.Errorf("need --n >= 1, --width and --height >= 16, --samples >= 1; got %d, %dx%d, %d", c.n, c.width, c.height, c.samples)
	}
	return generate(c)
}

// cameras returns the n cameras on the circle, view i at angle 2πi/n.
func cameras(c config) []camera {
	focal := 1.2 * float64(max(c.width, c.height))
	cams := make([]camera, c.n)
	for i := range cams {
		a := 2 * math.Pi * float64(i) / float64(c.n)
		centre := vec3{c.radius * math.Cos(a), c.radius * math.Sin(a), c.camZ}
		fwd := target.sub(centre).norm()
		right := fwd.cross(vec3{0, 0, 1}).norm()
		cams[i] = camera{
			centre: centre, forward: fwd, right: right, down: fwd.cross(right),
			focal: focal, cx: float64(c.width) / 2, cy: float64(c.height) / 2,
			width: c.width, height: c.height,
		}
	}
	return cams
}

// generate renders every view in parallel and writes the outputs.
func generate(c config) error {
	imgDir := filepath.Join(c.out, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return fmt.Errorf("create output: %w", err)
	}
	sc := newScene(c.seed, c.boxes, 13, 3.2)
	cams := cameras(c)
	encoded := make([][]byte, len(cams))
	errs := make([]error, len(cams))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range cams {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			img := render(sc, &cams[i], c.samples)
			var buf bytes.Buffer
			errs[i] = jpeg.Encode(&buf, img, &jpeg.Options{Quality: c.quality})
			encoded[i] = buf.Bytes()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	var gt bytes.Buffer
	for i, cam := range cams {
		name := viewName(i)
		if err := os.WriteFile(filepath.Join(imgDir, name), encoded[i], 0o644); err != nil {
			return fmt.Errorf("write view: %w", err)
		}
		fmt.Fprintf(&gt, "%s %.6f %.6f %.6f\n", name, cam.centre.x, cam.centre.y, cam.centre.z)
	}
	if err := os.WriteFile(filepath.Join(c.out, "gt.txt"), gt.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write ground truth: %w", err)
	}
	info, err := json.MarshalIndent(sceneInfo{
		Views: c.n, Width: c.width, Height: c.height, Seed: c.seed,
		Radius: c.radius, CameraZ: c.camZ, Focal: cams[0].focal,
	}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode scene info: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.out, "scene.json"), append(info, '\n'), 0o644); err != nil {
		return fmt.Errorf("write scene info: %w", err)
	}
	return nil
}

func viewName(i int) string { return fmt.Sprintf("view_%03d.jpg", i) }

// sun is the direction towards the light; shading is view independent.
var sun = vec3{0.4, 0.3, 0.87}.norm()

// sky is the colour of rays that miss everything.
var sky = [3]float64{0.62, 0.7, 0.78}

// render ray-casts one view with samples×samples supersampling.
func render(sc *scene, cam *camera, samples int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, cam.width, cam.height))
	inv := 1 / float64(samples*samples)
	for py := range cam.height {
		for px := range cam.width {
			var acc [3]float64
			for sy := range samples {
				for sx := range samples {
					u := float64(px) + (float64(sx)+0.5)/float64(samples)
					v := float64(py) + (float64(sy)+0.5)/float64(samples)
					col := shade(sc, cam, u, v)
					acc[0] += col[0]
					acc[1] += col[1]
					acc[2] += col[2]
				}
			}
			img.SetRGBA(px, py, color.RGBA{
				R: to8(acc[0] * inv), G: to8(acc[1] * inv), B: to8(acc[2] * inv), A: 255,
			})
		}
	}
	return img
}

// shade returns the colour seen through image point (u, v).
func shade(sc *scene, cam *camera, u, v float64) [3]float64 {
	d := cam.forward.scale(cam.focal).
		add(cam.right.scale(u - cam.cx)).
		add(cam.down.scale(v - cam.cy))
	dn := math.Sqrt(d.dot(d))
	d = d.scale(1 / dn)
	h, ok := sc.intersect(cam.centre, d)
	if !ok {
		return sky
	}
	// World units covered by one pixel at the hit, along its longest axis.
	footprint := h.t / dn / max(h.cosInc, 0.25)
	tex := sc.texture(h.surface, h.u, h.v, footprint)
	light := 0.55 + 0.45*max(0, h.normal.dot(sun))
	return [3]float64{tex[0] * light, tex[1] * light, tex[2] * light}
}

func to8(x float64) uint8 { return uint8(math.Round(clamp01(x) * 255)) }
