package main

import (
	"math"
	"math/rand/v2"
)

// vec3 is a point or a direction in world space (Z up).
type vec3 struct{ x, y, z float64 }

func (a vec3) add(b vec3) vec3      { return vec3{a.x + b.x, a.y + b.y, a.z + b.z} }
func (a vec3) sub(b vec3) vec3      { return vec3{a.x - b.x, a.y - b.y, a.z - b.z} }
func (a vec3) scale(s float64) vec3 { return vec3{a.x * s, a.y * s, a.z * s} }
func (a vec3) dot(b vec3) float64   { return a.x*b.x + a.y*b.y + a.z*b.z }
func (a vec3) cross(b vec3) vec3 {
	return vec3{a.y*b.z - a.z*b.y, a.z*b.x - a.x*b.z, a.x*b.y - a.y*b.x}
}
func (a vec3) norm() vec3 { return a.scale(1 / math.Sqrt(a.dot(a))) }

// box is an upright box standing on the ground, rotated about Z.
type box struct {
	cx, cy     float64 // centre of the footprint
	cosA, sinA float64 // rotation about Z
	hx, hy, hz float64 // half extents in X and Y, full height in Z
}

// scene is the ground square and the boxes on it.
type scene struct {
	seed   uint64
	ground float64 // half side of the ground square
	boxes  []box
}

// hit is where a ray met a surface.
type hit struct {
	t       float64 // distance along the (unit) ray
	surface uint64  // 0 ground, 1+6*box+face otherwise
	u, v    float64 // surface coordinates, world units
	normal  vec3
	cosInc  float64 // |cos| of the incidence angle
}

// newScene places nBoxes boxes at random within radius spread of the origin.
func newScene(seed uint64, nBoxes int, ground, spread float64) *scene {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	s := &scene{seed: seed, ground: ground}
	for range nBoxes {
		a := r.Float64() * math.Pi
		d := math.Sqrt(r.Float64()) * spread
		phi := r.Float64() * 2 * math.Pi
		s.boxes = append(s.boxes, box{
			cx: d * math.Cos(phi), cy: d * math.Sin(phi),
			cosA: math.Cos(a), sinA: math.Sin(a),
			hx: 0.4 + 0.7*r.Float64(), hy: 0.4 + 0.7*r.Float64(),
			hz: 0.6 + 2.0*r.Float64(),
		})
	}
	return s
}

// intersect returns the nearest hit of the ray o + t d (d unit), if any.
func (s *scene) intersect(o, d vec3) (hit, bool) {
	best := hit{t: math.Inf(1)}
	found := false
	if d.z < -1e-9 {
		t := -o.z / d.z
		p := o.add(d.scale(t))
		if t > 0 && math.Abs(p.x) <= s.ground && math.Abs(p.y) <= s.ground {
			best = hit{t: t, surface: 0, u: p.x, v: p.y, normal: vec3{0, 0, 1}, cosInc: -d.z}
			found = true
		}
	}
	for i := range s.boxes {
		if h, ok := s.boxes[i].intersect(o, d, uint64(1+6*i)); ok && h.t < best.t {
			best, found = h, true
		}
	}
	return best, found
}

// intersect is the slab test in the box's own frame.
func (b *box) intersect(o, d vec3, surfaceBase uint64) (hit, bool) {
	// Into the box frame: translate, then rotate by -angle.
	ox, oy := o.x-b.cx, o.y-b.cy
	lo := vec3{b.cosA*ox + b.sinA*oy, -b.sinA*ox + b.cosA*oy, o.z}
	ld := vec3{b.cosA*d.x + b.sinA*d.y, -b.sinA*d.x + b.cosA*d.y, d.z}
	tmin, tmax := math.Inf(-1), math.Inf(1)
	axis, sign := -1, 0.0
	slab := func(oc, dc, lo0, hi0 float64, ax int) bool {
		if math.Abs(dc) < 1e-12 {
			return oc >= lo0 && oc <= hi0
		}
		t1, t2 := (lo0-oc)/dc, (hi0-oc)/dc
		s := -1.0
		if t1 > t2 {
			t1, t2 = t2, t1
			s = 1
		}
		if t1 > tmin {
			tmin, axis, sign = t1, ax, s
		}
		tmax = min(tmax, t2)
		return tmin <= tmax
	}
	if !slab(lo.x, ld.x, -b.hx, b.hx, 0) || !slab(lo.y, ld.y, -b.hy, b.hy, 1) || !slab(lo.z, ld.z, 0, b.hz, 2) {
		return hit{}, false
	}
	if tmin <= 1e-6 || axis < 0 {
		return hit{}, false
	}
	p := lo.add(ld.scale(tmin))
	var n vec3
	var u, v float64
	face := uint64(2 * axis)
	if sign > 0 {
		face++
	}
	switch axis {
	case 0:
		n, u, v = vec3{sign, 0, 0}, p.y, p.z
	case 1:
		n, u, v = vec3{0, sign, 0}, p.x, p.z
	default:
		n, u, v = vec3{0, 0, sign}, p.x, p.y
	}
	cos := math.Abs(ld.dot(n))
	// Back to world: rotate the normal by +angle.
	wn := vec3{b.cosA*n.x - b.sinA*n.y, b.sinA*n.x + b.cosA*n.y, n.z}
	return hit{t: tmin, surface: surfaceBase + face, u: u, v: v, normal: wn, cosInc: cos}, true
}

// splitmix64 is a fast, well-mixed 64-bit hash step.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func hash(a, b, c, d, e uint64) uint64 {
	h := splitmix64(a)
	h = splitmix64(h ^ b)
	h = splitmix64(h ^ c)
	h = splitmix64(h ^ d)
	return splitmix64(h ^ e)
}

// unit maps 53 bits of h to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// textureLayers are the cell sizes of the dead-leaves layers, finest first;
// the finest is drawn on top.
var textureLayers = []float64{0.06, 0.12, 0.25, 0.5, 1.0, 2.0}

// texture is a multi-scale "dead leaves" pattern: each layer's cells hold at
// most one disk or rotated square of random colour; finer layers cover
// coarser ones. Layers finer than footprint (world units per pixel) are
// skipped, which band-limits distant surfaces.
func (s *scene) texture(surface uint64, u, v, footprint float64) [3]float64 {
	for li, cell := range textureLayers {
		if cell < 2.2*footprint {
			continue
		}
		gx, gy := math.Floor(u/cell), math.Floor(v/cell)
		for dy := -1.0; dy <= 1; dy++ {
			for dx := -1.0; dx <= 1; dx++ {
				cx, cy := gx+dx, gy+dy
				h := hash(s.seed, uint64(li), surface, uint64(int64(cx)), uint64(int64(cy)))
				if unit(h) > 0.55 {
					continue
				}
				h1 := splitmix64(h)
				h2 := splitmix64(h1)
				h3 := splitmix64(h2)
				px := (cx + unit(h1)) * cell
				py := (cy + unit(h2)) * cell
				rad := (0.22 + 0.45*unit(h3)) * cell
				ddx, ddy := u-px, v-py
				inside := false
				if h3&1 == 0 {
					inside = ddx*ddx+ddy*ddy <= rad*rad
				} else {
					a := unit(splitmix64(h3)) * math.Pi / 2
					ca, sa := math.Cos(a), math.Sin(a)
					inside = math.Abs(ca*ddx+sa*ddy) <= rad && math.Abs(-sa*ddx+ca*ddy) <= rad*0.8
				}
				if inside {
					return colour(splitmix64(h3 ^ 0x5bd1e995))
				}
			}
		}
	}
	return colour(hash(s.seed, 99, surface, uint64(int64(math.Floor(u/4))), uint64(int64(math.Floor(v/4)))))
}

// colour is a saturated random colour with a random brightness.
func colour(h uint64) [3]float64 {
	l := 0.08 + 0.9*unit(h)
	h = splitmix64(h)
	r, g, b := unit(h), unit(splitmix64(h)), unit(splitmix64(splitmix64(h)))
	m := (r + g + b) / 3
	return [3]float64{
		clamp01(l + 0.35*(r-m)),
		clamp01(l + 0.35*(g-m)),
		clamp01(l + 0.35*(b-m)),
	}
}

func clamp01(x float64) float64 { return max(0, min(1, x)) }
