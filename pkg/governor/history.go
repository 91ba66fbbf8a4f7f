package governor

import (
	"math"
	"time"
)

// classHistory is a bounded ring of finished batches of one class.
type classHistory struct {
	recs  []BatchRecord
	next  int // ring position of the next record once full
	total int // records ever added
}

// ClassStats is what the history of a class says about its costs.
type ClassStats struct {
	// Samples is the number of batches kept; Succeeded of them exited 0.
	Samples, Succeeded int
	// Total is the number of batches ever recorded for the class.
	Total int
	// FixedBytes, PerItemBytes and PerThreadBytes are the least-squares fit
	// peak ≈ fixed + perItem·items + perThread·threads over the successful
	// batches with a measured peak. A cost the history cannot separate
	// (items or threads never varied) is 0 and folded into FixedBytes.
	FixedBytes, PerItemBytes, PerThreadBytes int64
	// MaxPeakBytes is the largest peak seen.
	MaxPeakBytes int64
	// PerItem is the mean duration per item of the successful batches.
	PerItem time.Duration
}

// RecordBatch adds a finished batch to its class's bounded history (the
// oldest record is dropped when full). Records of more than MaxClasses
// classes are dropped.
func (g *Governor) RecordBatch(class string, rec BatchRecord) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.closed {
		return
	}
	h := g.mu.history[class]
	if h == nil {
		if len(g.mu.history) >= MaxClasses {
			return
		}
		h = &classHistory{recs: make([]BatchRecord, 0, g.cfg.HistorySize)}
		g.mu.history[class] = h
	}
	if len(h.recs) < g.cfg.HistorySize {
		h.recs = append(h.recs, rec)
	} else {
		h.recs[h.next] = rec
		h.next = (h.next + 1) % len(h.recs)
	}
	h.total++
}

// History returns the observed costs of a class (the zero ClassStats when
// nothing was recorded, or after Close).
func (g *Governor) History(class string) ClassStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.mu.history[class]
	if g.mu.closed || h == nil {
		return ClassStats{}
	}
	return h.stats()
}

// stats fits the costs over the kept records.
func (h *classHistory) stats() ClassStats {
	st := ClassStats{Samples: len(h.recs), Total: h.total}
	// Normal equations of peak = a + b·x + c·y, x items, y threads.
	var n, sx, sy, sxx, syy, sxy, sp, sxp, syp float64
	var dur time.Duration
	var items int64
	for _, r := range h.recs {
		st.MaxPeakBytes = max(st.MaxPeakBytes, r.PeakMemoryBytes)
		if r.ExitCode != 0 {
			continue
		}
		st.Succeeded++
		if r.Items > 0 && r.Duration > 0 {
			dur += r.Duration
			items += r.Items
		}
		if r.PeakMemoryBytes <= 0 {
			continue
		}
		x, y, p := float64(r.Items), float64(r.Threads), float64(r.PeakMemoryBytes)
		n++
		sx, sy, sp = sx+x, sy+y, sp+p
		sxx, syy, sxy = sxx+x*x, syy+y*y, sxy+x*y
		sxp, syp = sxp+x*p, syp+y*p
	}
	if items > 0 {
		st.PerItem = dur / time.Duration(items)
	}
	if n == 0 {
		return st
	}
	// Centred sums: variances and covariances.
	vx, vy, cxy := sxx-sx*sx/n, syy-sy*sy/n, sxy-sx*sy/n
	cxp, cyp := sxp-sx*sp/n, syp-sy*sp/n
	const eps = 1e-9
	var b, c float64
	switch det := vx*vy - cxy*cxy; {
	case vx > eps && vy > eps && math.Abs(det) > eps*vx*vy:
		b = (cxp*vy - cyp*cxy) / det
		c = (cyp*vx - cxp*cxy) / det
	case vx > eps:
		b = cxp / vx
	case vy > eps:
		c = cyp / vy
	}
	a := (sp - b*sx - c*sy) / n
	st.FixedBytes, st.PerItemBytes, st.PerThreadBytes = round(a), round(b), round(c)
	return st
}

// round converts a fitted amount to bytes, saturating.
func round(v float64) int64 {
	switch {
	case math.IsNaN(v):
		return 0
	case v >= math.MaxInt64:
		return math.MaxInt64
	case v <= math.MinInt64:
		return math.MinInt64
	}
	return int64(math.Round(v))
}
