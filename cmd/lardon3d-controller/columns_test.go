package main

import (
	"math/rand/v2"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/lardon3d/lardon3d-controller/internal/testseed"
)

// TestAlignColumnsIsTabwriter: on random tables, alignColumns lays out
// exactly what text/tabwriter does: tables whose lines all have as many
// cells (its own layout), ragged ones and ones holding tabwriter's layout
// characters (handed to tabwriter), with empty cells, wide runes and
// columns left empty.
func TestAlignColumnsIsTabwriter(t *testing.T) {
	pieces := []string{"", "a", "Done", "t-00001", "12/40 +3", "peak 1.2Gi", "é", "日本語", "\\x1b", " ", "\v", "\f", "x\ny"}
	for _, seed := range testseed.Seeds(t, 1, 2, 3) {
		rng := rand.New(rand.NewPCG(seed, 0))
		for round := range 2000 {
			cells := rng.IntN(6)
			ragged := rng.IntN(5) == 0
			layout := rng.IntN(5) == 0 // may draw \v, \f and inner newlines
			var lines []string
			for range rng.IntN(8) {
				n := cells
				if ragged {
					n = rng.IntN(6)
				}
				var line strings.Builder
				for c := 0; c <= n; c++ {
					if c > 0 {
						line.WriteByte('\t')
					}
					for range rng.IntN(3) {
						p := pieces[rng.IntN(len(pieces))]
						if !layout && strings.ContainsAny(p, "\v\f\n") {
							continue
						}
						line.WriteString(p)
					}
				}
				lines = append(lines, line.String())
			}
			padding := rng.IntN(4)
			var tw strings.Builder
			w := tabwriter.NewWriter(&tw, 0, 0, padding, ' ', 0)
			for _, line := range lines {
				_, _ = w.Write([]byte(line + "\n"))
			}
			_ = w.Flush()
			if got := alignColumns(lines, padding); got != tw.String() {
				t.Fatalf("seed %d round %d, padding %d, lines %q:\ngot  %q\nwant %q", seed, round, padding, lines, got, tw.String())
			}
			if _, _, own := layColumns(lines, padding, nil); !ragged && !layout && !own {
				// A plain table of even lines is laid out without tabwriter.
				t.Fatalf("seed %d round %d: lines %q not laid out by layColumns", seed, round, lines)
			}
		}
	}
}
