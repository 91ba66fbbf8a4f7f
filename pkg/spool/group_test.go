package spool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// TestWriteStatusesGroup: a group write-back leaves each file exactly as
// ReplaceStatus would (the first time through the full rewrite, then
// through the known layout), keeps each file's modification time, and
// leaves no temp file.
func TestWriteStatusesGroup(t *testing.T) {
	dir := fastTempDir(t)
	sp := newTestSpool(t, dir)
	var ws []StatusWrite
	var srcs [][]byte
	var mtimes []time.Time
	for i, s := range fuzzSeeds {
		path := filepath.Join(dir, fmt.Sprintf("t%d.yaml", i))
		if err := os.WriteFile(path, []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
		old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, StatusWrite{Path: path, Status: fuzzStatus("Running", fmt.Sprintf("round 0 file %d", i))})
		srcs = append(srcs, []byte(s))
		mtimes = append(mtimes, old)
	}
	for round := 0; round < 3; round++ {
		for i := range ws {
			ws[i].Status = fuzzStatus("Running", fmt.Sprintf("round %d file %d", round, i))
			ws[i].Status.Progress.ItemsDone = int64(round)
		}
		for i, err := range sp.WriteStatuses(ws) {
			if err != nil {
				t.Fatalf("round %d, %s: %v", round, ws[i].Path, err)
			}
		}
		for i, w := range ws {
			want, err := ReplaceStatus(srcs[i], w.Status)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(w.Path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("round %d, %s:\ngot  %q\nwant %q", round, w.Path, got, want)
			}
			fi, err := os.Stat(w.Path)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.ModTime().Equal(mtimes[i]) || fi.Mode().Perm() != 0o640 {
				t.Fatalf("%s: mtime %v mode %v, want %v 0640", w.Path, fi.ModTime(), fi.Mode().Perm(), mtimes[i])
			}
			srcs[i] = got
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Fatalf("left behind: %s", e.Name())
		}
	}
	// The second and third rounds went through the known layouts.
	if hits := sp.stats.KnownLayout.Load(); hits < int64(2*len(ws)) {
		t.Fatalf("%d write-backs through a known layout, want at least %d", hits, 2*len(ws))
	}
}

// TestWriteStatusesBusyMember: a file held open for writing does not hold
// up the group: the others are written, it reports ErrBusy (WriteStatus's
// answer when no Run makes deferred writes), and is left untouched.
func TestWriteStatusesBusyMember(t *testing.T) {
	dir := fastTempDir(t)
	sp, err := Open(dir, Options{BusyWait: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	var ws []StatusWrite
	for i := 0; i < 4; i++ {
		path := filepath.Join(dir, fmt.Sprintf("t%d.yaml", i))
		if err := os.WriteFile(path, []byte(appendManifest), 0o600); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, StatusWrite{Path: path, Status: &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, QueueSeq: int64(i + 1)}})
	}
	held, err := os.OpenFile(ws[2].Path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	errs := sp.WriteStatuses(ws)
	for i, w := range ws {
		got, err := os.ReadFile(w.Path)
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			if !errors.Is(errs[i], ErrBusy) || string(got) != appendManifest {
				t.Fatalf("held file: err %v, content %q", errs[i], got)
			}
			continue
		}
		if errs[i] != nil || !bytes.Contains(got, []byte(fmt.Sprintf("queueSeq: %d", i+1))) {
			t.Fatalf("%s: err %v, content %q", w.Path, errs[i], got)
		}
	}
}

// TestAppendsDuringGroupWrites is TestAppendsDuringStatusWrites with the
// write-backs made in groups of three files: every appended line must be
// in the file at the end, once.
func TestAppendsDuringGroupWrites(t *testing.T) {
	const n = 1000
	dir := fastTempDir(t)
	var paths []string
	for i := 0; i < 3; i++ {
		p := filepath.Join(dir, fmt.Sprintf("t%d.yaml", i))
		if err := os.WriteFile(p, []byte(appendManifest), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	sp := newTestSpool(t, dir)
	w := startGroupWriter(t, sp, paths)
	for i := 1; i <= n; i++ {
		if err := appendLine(paths[0], fmt.Sprintf("# append-%d\n", i)); err != nil {
			t.Fatal(err)
		}
		if i%20 == 0 {
			w.waitRounds(t, 1)
		}
	}
	w.waitRounds(t, 2)
	w.halt()
	w.check(t)
	sp.Close()
	got, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	logStats(t, sp)
	lost := 0
	for i := 1; i <= n; i++ {
		if c := bytes.Count(got, []byte(fmt.Sprintf("# append-%d\n", i))); c != 1 {
			lost++
			if lost < 5 {
				t.Errorf("append-%d found %d times", i, c)
			}
		}
	}
	if lost > 0 || !bytes.Contains(got, []byte("status:\n  phase: Running")) {
		t.Fatalf("%d of %d appends lost or doubled; status written: %v", lost, n, bytes.Contains(got, []byte("status:")))
	}
}

// startGroupWriter is startStatusWriter writing paths as one group.
func startGroupWriter(t *testing.T, sp *Spool, paths []string) *statusWriter {
	t.Helper()
	w := &statusWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := int64(1); ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			ws := make([]StatusWrite, len(paths))
			for j, p := range paths {
				ws[j] = StatusWrite{Path: p, Status: &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseRunning, QueueSeq: i}}
			}
			for _, err := range sp.WriteStatuses(ws) {
				switch {
				case err == nil, errors.Is(err, ErrBusy), errors.Is(err, ErrNotRewritable), errors.Is(err, ErrConflict), errors.Is(err, os.ErrNotExist):
				default:
					w.err.Store(err)
					return
				}
			}
			w.rounds.Add(1)
		}
	}()
	t.Cleanup(w.halt)
	return w
}

// TestWriteStatusesSkipsUntouchedFiles: a group that writes again the
// status a file already got from the last group, the file untouched since,
// reads nothing; a file changed meanwhile (here: an append, which keeps
// the status) is read and checked again, and the append survives.
func TestWriteStatusesSkipsUntouchedFiles(t *testing.T) {
	dir := fastTempDir(t)
	sp := newTestSpool(t, dir)
	var ws []StatusWrite
	for i := 0; i < 3; i++ {
		path := filepath.Join(dir, fmt.Sprintf("t%d.yaml", i))
		if err := os.WriteFile(path, []byte(appendManifest), 0o600); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, StatusWrite{Path: path, Status: &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseDone, QueueSeq: int64(i + 1)}})
	}
	for _, err := range sp.WriteStatuses(ws) {
		if err != nil {
			t.Fatal(err)
		}
	}
	rounds := sp.stats.Rounds.Load()
	for _, err := range sp.WriteStatuses(ws) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := sp.stats.Rounds.Load() - rounds; got != 0 {
		t.Fatalf("%d rounds for files untouched since they got the same status", got)
	}
	if err := appendLine(ws[1].Path, "# appended\n"); err != nil {
		t.Fatal(err)
	}
	ws[0].Status = &v1alpha1.TaskStatus{Phase: v1alpha1.PhaseFailed, QueueSeq: 1}
	rounds = sp.stats.Rounds.Load()
	for _, err := range sp.WriteStatuses(ws) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := sp.stats.Rounds.Load() - rounds; got != 2 {
		t.Fatalf("%d rounds, want 2 (the new status, the appended file)", got)
	}
	got, _ := os.ReadFile(ws[1].Path)
	first, _ := os.ReadFile(ws[0].Path)
	if !bytes.Contains(got, []byte("# appended\n")) || !bytes.Contains(first, []byte("phase: Failed")) {
		t.Fatalf("t1 %q\nt0 %q", got, first)
	}
}
