package runner

import (
	"os"
	"strings"
	"sync"
	"testing"
)

// progressOf feeds stream to a scanner in the chunks cut at the offsets
// in cuts, as a command writing it piece by piece would, and returns the
// count after each chunk.
func progressOf(t *testing.T, stream string, size int64, cuts ...int) []int64 {
	t.Helper()
	p := newProgressScanner(size)
	var counts []int64
	prev := 0
	for _, c := range append(cuts, len(stream)) {
		p.scan([]byte(stream[prev:c]))
		prev = c
		counts = append(counts, p.count)
	}
	return counts
}

func TestProgressLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream string
		want   int64
	}{
		{"none", "hello\nworld\n", -1},
		{"one", "LARDON3D_PROGRESS 3\n", 3},
		{"last wins", "LARDON3D_PROGRESS 3\nnoise\nLARDON3D_PROGRESS 5/10\n", 5},
		{"crlf and spaces", "LARDON3D_PROGRESS  7 \r\n", 7},
		{"clamped to the batch", "LARDON3D_PROGRESS 999\n", 10},
		{"negative is zero", "LARDON3D_PROGRESS -4\n", 0},
		{"not at line start", "say LARDON3D_PROGRESS 4\n", -1},
		{"garbage ignored", "LARDON3D_PROGRESS 4\nLARDON3D_PROGRESS four\nLARDON3D_PROGRESS \n", 4},
		{"unfinished line waits", "LARDON3D_PROGRESS 4\nLARDON3D_PROGRESS 6", 4},
		{"overlong line ignored", "LARDON3D_PROGRESS 2\nLARDON3D_PROGRESS 8" + strings.Repeat(" ", 200) + "\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := progressOf(t, tc.stream, 10)
			if got[len(got)-1] != tc.want {
				t.Errorf("count %d, want %d", got[len(got)-1], tc.want)
			}
		})
	}
}

// TestProgressAnyWriteBoundary: however the command's writes cut the
// stream, the reader sees the same counts at each line's end.
func TestProgressAnyWriteBoundary(t *testing.T) {
	stream := "x\nLARDON3D_PROGRESS 1\nLARDON3D_PROGRESS 22\nLARDON3D_PROGRESSX 9\nLARDON3D_PROGRESS 3/4\n"
	want := progressOf(t, stream, 100)[0]
	for cut := 1; cut < len(stream); cut++ {
		for cut2 := cut; cut2 < len(stream); cut2 += 7 {
			got := progressOf(t, stream, 100, cut, cut2)
			if got[len(got)-1] != want {
				t.Fatalf("cuts %d,%d: count %d, want %d", cut, cut2, got[len(got)-1], want)
			}
		}
	}
	if want != 3 {
		t.Fatalf("count %d, want 3", want)
	}
}

// TestProgressFloodKeepsTheLastReport: a command that wrote megabytes
// between two reports still has its last report seen.
func TestProgressFloodKeepsTheLastReport(t *testing.T) {
	noise := strings.Repeat("some output that is not progress\n", 100_000)
	got := progressOf(t, "LARDON3D_PROGRESS 1\n"+noise+"LARDON3D_PROGRESS 9\n", 10)
	if got[0] != 9 {
		t.Fatalf("count %d, want 9", got[0])
	}
}

// TestBatchReportsProgress: a real command's progress lines reach
// OnProgress while it runs, and lines of an earlier batch in the same log
// do not count.
func TestBatchReportsProgress(t *testing.T) {
	s := testSpec(t, "sh", "-c", `
		echo "LARDON3D_PROGRESS 1"; sleep 0.3
		echo "LARDON3D_PROGRESS 2" >&2; sleep 0.3
		printf 'LARDON3D_PROG'; sleep 0.2; printf 'RESS 3\n'; sleep 0.3`)
	s.Items, s.ItemsTotal = []string{"a", "b", "c", "d"}, 4
	if err := os.WriteFile(s.LogPath, []byte("LARDON3D_PROGRESS 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []int64
	s.OnProgress = func(n int64) {
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
	}
	b := start(t, s)
	if r := b.Wait(); r.ExitCode != 0 {
		t.Fatalf("exit %d: %s", r.ExitCode, r.Message)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []int64{1, 2, 3}
	if len(seen) != len(want) {
		t.Fatalf("reported %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("reported %v, want %v", seen, want)
		}
	}
}

// FuzzProgressReader: whatever a command writes, cut however its writes
// fall, the reader never fails, keeps the count within the batch, and ends
// with the count a single read of the whole output gives.
func FuzzProgressReader(f *testing.F) {
	f.Add("LARDON3D_PROGRESS 3\n", uint16(5), uint16(9))
	f.Add("x\nLARDON3D_PROGRESS 12/40\r\nLARDON3D_PROGRESS 9999999999999999999999\n", uint16(1), uint16(30))
	f.Add("LARDON3D_PROGRESS \nLARDON3D_PROGRESS -1\nLARDON3D_PROGRESS 2", uint16(17), uint16(18))
	f.Fuzz(func(t *testing.T, stream string, a, b uint16) {
		cuts := []int{int(a) % (len(stream) + 1), int(b) % (len(stream) + 1)}
		if cuts[0] > cuts[1] {
			cuts[0], cuts[1] = cuts[1], cuts[0]
		}
		want := progressOf(t, stream, 10)[0]
		got := progressOf(t, stream, 10, cuts...)
		for _, c := range got {
			if c < -1 || c > 10 {
				t.Fatalf("count %d outside [-1, 10]", c)
			}
		}
		if got[len(got)-1] != want {
			t.Fatalf("cuts %v: count %d, one read gives %d", cuts, got[len(got)-1], want)
		}
	})
}
