// Command evaluate scores a COLMAP reconstruction of genviews' scene.
//
// It reads a model in COLMAP's TXT format (images.txt, points3D.txt), already
// aligned to the ground truth by colmap model_aligner, the ground truth
// camera centres (gt.txt: "name X Y Z" per line) and the camera circle's
// radius (scene.json), and prints one line:
//
//	registered 24/24, points 3456, mean camera-centre error 0.8% of radius
//
// Cameras are matched by image name, never by id (ids depend on the order in
// which extraction threads finished). It exits 1 when fewer than --min-registered
// of the views are registered or the mean error is not below --max-error,
// 2 on a usage or input error. Standard library only.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// errBelowThreshold reports a reconstruction that does not meet the thresholds.
var errBelowThreshold = errors.New("below threshold")

// vec3 is a point in world space.
type vec3 [3]float64

// result is what evaluate measures.
type result struct {
	Registered, Total int
	Points            int
	MeanError         float64 // mean camera-centre error, fraction of the radius
	MaxError          float64 // worst camera-centre error, fraction of the radius
}

func (r result) String() string {
	return fmt.Sprintf("registered %d/%d, points %d, mean camera-centre error %.2f%% of radius (max %.2f%%)",
		r.Registered, r.Total, r.Points, 100*r.MeanError, 100*r.MaxError)
}

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, errBelowThreshold):
		fmt.Fprintln(os.Stderr, "evaluate:", err)
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "evaluate:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("evaluate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "", "directory of the aligned model in TXT format (images.txt, points3D.txt)")
	gtPath := fs.String("gt", "", "ground truth camera centres (gt.txt)")
	scenePath := fs.String("scene", "", "scene.json written by genviews (for the radius)")
	minReg := fs.Float64("min-registered", 0.9, "fewest registered views, as a fraction of all views")
	maxErr := fs.Float64("max-error", 0.05, "mean camera-centre error must be below this fraction of the radius")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || *gtPath == "" || *scenePath == "" {
		return errors.New("--model, --gt and --scene are required")
	}
	radius, err := readRadius(*scenePath)
	if err != nil {
		return err
	}
	gt, err := readFile(*gtPath, parseGroundTruth)
	if err != nil {
		return err
	}
	centres, err := readFile(filepath.Join(*model, "images.txt"), parseImages)
	if err != nil {
		return err
	}
	points, err := readFile(filepath.Join(*model, "points3D.txt"), countPoints)
	if err != nil {
		return err
	}
	r, err := score(gt, centres, points, radius)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, r)
	if float64(r.Registered) < *minReg*float64(r.Total) {
		return fmt.Errorf("%w: %d of %d views registered, need %.0f%%", errBelowThreshold, r.Registered, r.Total, 100**minReg)
	}
	if !(r.MeanError < *maxErr) {
		return fmt.Errorf("%w: mean camera-centre error %.2f%% of radius, need < %.2f%%", errBelowThreshold, 100*r.MeanError, 100**maxErr)
	}
	return nil
}

// score compares the reconstructed centres to the ground truth by name.
func score(gt, centres map[string]vec3, points int, radius float64) (result, error) {
	if len(gt) == 0 {
		return result{}, errors.New("ground truth is empty")
	}
	if !(radius > 0) {
		return result{}, fmt.Errorf("radius must be > 0, got %g", radius)
	}
	r := result{Total: len(gt), Points: points}
	sum := 0.0
	for name, c := range centres {
		want, ok := gt[name]
		if !ok {
			return result{}, fmt.Errorf("image %q of the model is not in the ground truth", name)
		}
		d := math.Sqrt(sq(c[0]-want[0]) + sq(c[1]-want[1]) + sq(c[2]-want[2]))
		sum += d
		r.MaxError = max(r.MaxError, d/radius)
		r.Registered++
	}
	if r.Registered == 0 {
		r.MeanError = math.Inf(1)
		return r, nil
	}
	r.MeanError = sum / float64(r.Registered) / radius
	return r, nil
}

func sq(x float64) float64 { return x * x }

func readRadius(path string) (float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read scene: %w", err)
	}
	var s struct {
		Radius float64 `json:"radius"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return 0, fmt.Errorf("parse scene %s: %w", path, err)
	}
	return s.Radius, nil
}

func readFile[T any](path string, parse func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("open: %w", err)
	}
	defer f.Close()
	v, err := parse(f)
	if err != nil {
		return v, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// dataLines calls fn with the number and fields of every line that is
// neither blank nor a comment.
func dataLines(r io.Reader, fn func(n int, fields []string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<28) // POINTS2D lines are long
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, strings.Fields(line)); err != nil {
			return err
		}
		n++
	}
	return sc.Err()
}

// parseGroundTruth reads "name X Y Z" lines.
func parseGroundTruth(r io.Reader) (map[string]vec3, error) {
	gt := map[string]vec3{}
	err := dataLines(r, func(_ int, f []string) error {
		if len(f) != 4 {
			return fmt.Errorf("want \"name X Y Z\", got %q", strings.Join(f, " "))
		}
		p, err := floats(f[1:4])
		if err != nil {
			return err
		}
		gt[f[0]] = vec3{p[0], p[1], p[2]}
		return nil
	})
	return gt, err
}

// parseImages reads COLMAP's images.txt and returns each image's centre
// C = -Rᵀt, keyed by name. Every image takes two lines; the second
// (its 2D points) may be empty, which dataLines skips, so image lines are
// recognised by their shape: ten fields, the first an integer id.
func parseImages(r io.Reader) (map[string]vec3, error) {
	centres := map[string]vec3{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<28)
	header := true // the next data line is an image header
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if !header {
			header = true
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 10 {
			return nil, fmt.Errorf("image line: want 10 fields, got %d", len(f))
		}
		v, err := floats(f[1:8])
		if err != nil {
			return nil, err
		}
		centres[f[9]] = centre(v[0], v[1], v[2], v[3], vec3{v[4], v[5], v[6]})
		header = false
	}
	return centres, sc.Err()
}

// centre returns -Rᵀt for the rotation of unit quaternion (w, x, y, z).
func centre(w, x, y, z float64, t vec3) vec3 {
	n := math.Sqrt(w*w + x*x + y*y + z*z)
	w, x, y, z = w/n, x/n, y/n, z/n
	R := [3][3]float64{
		{1 - 2*(y*y+z*z), 2 * (x*y - w*z), 2 * (x*z + w*y)},
		{2 * (x*y + w*z), 1 - 2*(x*x+z*z), 2 * (y*z - w*x)},
		{2 * (x*z - w*y), 2 * (y*z + w*x), 1 - 2*(x*x+y*y)},
	}
	var c vec3
	for i := range 3 {
		for j := range 3 {
			c[i] -= R[j][i] * t[j]
		}
	}
	return c
}

// countPoints counts the data lines of points3D.txt.
func countPoints(r io.Reader) (int, error) {
	count := 0
	err := dataLines(r, func(int, []string) error { count++; return nil })
	return count, err
}

func floats(s []string) ([]float64, error) {
	out := make([]float64, len(s))
	for i, v := range s {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("number: %w", err)
		}
		out[i] = f
	}
	return out, nil
}
