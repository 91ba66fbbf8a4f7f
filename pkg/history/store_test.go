package history

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/internal/damagedbolt"
	"github.com/lardon3d/lardon3d-controller/internal/testseed"
)

// writerEnv makes the test binary a writer process for the crash test:
// it appends records to the store named by the variable until killed,
// printing each committed record's number.
const writerEnv = "LARDON3D_HISTORY_WRITER"

func TestMain(m *testing.M) {
	if path := os.Getenv(writerEnv); path != "" {
		os.Exit(writer(path))
	}
	os.Exit(m.Run())
}

// writer appends numbered records to two profiles, one transaction of
// one or three records at a time, continuing from the largest number the
// store holds.
func writer(path string) int {
	s, err := Open(path, Options{MaxRecords: 50, LockTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	all, _, err := s.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var n int64
	for _, recs := range all {
		for _, r := range recs {
			n = max(n, r.Items)
		}
	}
	out := bufio.NewWriter(os.Stdout)
	for {
		var batch []Entry
		for range 1 + 2*int(n%2) {
			n++
			batch = append(batch, Entry{Profile: fmt.Sprintf("p%d", n%2), Record: Record{
				Time: time.Now(), Task: strings.Repeat("t", int(n%300)), Items: n, Threads: 1, PeakMemoryBytes: n << 20,
			}})
		}
		if err := s.Append(batch...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Fprintf(out, "%d\n", n)
		out.Flush()
	}
}

func TestRestartKeepsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		{Time: time.Unix(100, 0).UTC(), Task: "a", Items: 4, Threads: 2, InputBytes: 1234, PeakMemoryBytes: 540 << 20, WorkingSetBytes: 500 << 20, LimitBytes: 600 << 20, Duration: 3 * time.Second},
		{Time: time.Unix(200, 0).UTC(), Task: "a", Items: 8, Threads: 2, PeakMemoryBytes: 900 << 20, LimitBytes: 800 << 20, Duration: time.Second, ExitCode: -1, Reason: "MemoryExceeded", KilledForMemory: true},
	}
	for _, r := range want {
		if err := s.Append(Entry{Profile: "features/colmap", Record: r}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(path, Options{}); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second writer: err %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, skipped, err := s.Load()
	if err != nil || skipped != 0 {
		t.Fatalf("load: %v, %d skipped", err, skipped)
	}
	if len(got["features/colmap"]) != 2 {
		t.Fatalf("after restart: %+v", got)
	}
	for i, r := range got["features/colmap"] {
		if r != want[i] {
			t.Errorf("record %d: got %+v, want %+v", i, r, want[i])
		}
	}
	if m := Fit(got["features/colmap"], Params{}); m.Samples != 1 || m.Censored != 1 {
		t.Errorf("model after restart: %+v", m)
	}
}

func TestBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{MaxRecords: 5, MaxProfiles: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 12 {
		if err := s.Append(Entry{Profile: "a", Record: Record{Time: time.Unix(int64(i), 0), Items: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range []string{"b", "c", "d"} {
		if err := s.Append(Entry{Profile: p, Record: Record{Time: time.Unix(int64(100+i), 0), Items: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["a"]; ok || len(got) != 3 {
		t.Fatalf("profiles %v: want b, c, d (a, the oldest, evicted)", keys(got))
	}
	for i := range 7 {
		if err := s.Append(Entry{Profile: "d", Record: Record{Time: time.Unix(int64(200+i), 0), Items: int64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	got, _, _ = s.Load()
	if d := got["d"]; len(d) != 5 || d[0].Items != 2 || d[4].Items != 6 {
		t.Fatalf("profile d keeps %+v, want the last 5", d)
	}
	if err := s.Append(Entry{Profile: "", Record: Record{}}); !errors.Is(err, ErrBadProfile) {
		t.Fatalf("empty profile: %v", err)
	}
	// The file stays bounded: rewriting the same profiles again and again
	// reuses freed pages.
	st, _ := os.Stat(path)
	for i := range 300 {
		_ = s.Append(Entry{Profile: "d", Record: Record{Time: time.Unix(int64(300+i), 0), Items: int64(i), Task: strings.Repeat("x", 200)}})
	}
	st2, _ := os.Stat(path)
	if st2.Size() > 4*st.Size()+(256<<10) {
		t.Fatalf("file grew from %d to %d bytes for a bounded history", st.Size(), st2.Size())
	}
}

func keys(m map[string][]Record) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A real writer process is killed with SIGKILL at random moments, many
// times over, while it appends: the store always opens, passes bbolt's
// consistency check, holds every record the writer reported committed
// (within the bound) and nothing torn, and its records are contiguous.
func TestKillDuringWritesNeverCorrupts(t *testing.T) {
	rounds := testseed.Count(t, "LARDON3D_HISTORY_KILL_ROUNDS", 25)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range testseed.Seeds(t, 11) {
		rng := rand.New(rand.NewPCG(seed, 1))
		path := filepath.Join(t.TempDir(), FileName)
		var committed int64
		for round := range rounds {
			cmd := exec.Command(exe)
			cmd.Env = append(os.Environ(), writerEnv+"="+path)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan int64, 1<<16)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if n, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
						lines <- n
					}
				}
				close(lines)
			}()
			// Let it commit a few records, then kill it at a random moment.
			select {
			case n, ok := <-lines:
				if !ok {
					_ = cmd.Wait()
					t.Fatalf("round %d: writer exited: %s", round, stderr.String())
				}
				committed = max(committed, n)
			case <-time.After(20 * time.Second):
				t.Fatalf("round %d: writer committed nothing", round)
			}
			time.Sleep(time.Duration(rng.IntN(40_000)) * time.Microsecond)
			_ = cmd.Process.Signal(syscall.SIGKILL)
			for n := range lines {
				committed = max(committed, n)
			}
			_ = cmd.Wait()

			s, err := Open(path, Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("round %d: open after kill: %v", round, err)
			}
			if err := s.Check(); err != nil {
				t.Fatalf("round %d: store corrupt after kill: %v", round, err)
			}
			all, skipped, err := s.Load()
			_ = s.Close()
			if err != nil || skipped > 0 {
				t.Fatalf("round %d: load: %v, %d records torn", round, err, skipped)
			}
			var largest int64
			for p, recs := range all {
				if len(recs) > 50 {
					t.Fatalf("round %d: %s holds %d records, bound 50", round, p, len(recs))
				}
				for i := 1; i < len(recs); i++ {
					if recs[i].Items != recs[i-1].Items+2 {
						t.Fatalf("round %d: %s not contiguous: %d after %d", round, p, recs[i].Items, recs[i-1].Items)
					}
				}
				if len(recs) > 0 {
					largest = max(largest, recs[len(recs)-1].Items)
				}
			}
			// Reported committed ⇒ on disk. At most the transaction in
			// flight (three records) may be there without being reported.
			if largest < committed || largest > committed+3 {
				t.Fatalf("round %d: the writer reported %d committed, the store's newest is %d", round, committed, largest)
			}
			committed = largest
		}
		t.Logf("%d kills, %d records written", rounds, committed)
	}
}

// A store with intact meta pages and scribbled data pages is an error
// (ErrCorrupt) from Open or Load, never a panic.
func TestScribbledPagesAreAnErrorNotAPanic(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	damagedbolt.Write(t, path)
	s, err := Open(path, Options{})
	if err == nil {
		_, _, err = s.Load()
		_ = s.Close()
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open+Load of a scribbled store: %v, want ErrCorrupt", err)
	}
}
