package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// TestGroupJournalKillsWhatACrashLeft: a batch recorded in the journal and
// never ended (its controller died) is killed by the next killLeftovers,
// through the journal alone (the batch does not carry the state
// directory's variable), and the handled journal is removed.
func TestGroupJournalKillsWhatACrashLeft(t *testing.T) {
	state := t.TempDir()
	run := filepath.Join(state, "run")
	rb, err := runner.Start(context.Background(), runner.Spec{
		Task: "left", Command: []string{"sh", "-c", "sleep 60 & sleep 60"}, Items: []string{"0"},
		LogPath: filepath.Join(state, "left.log"), RunDir: run,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rb.Cancel(); rb.Wait() })
	j := newGroupJournal(run)
	if err := j.started("left", rb.Group()); err != nil {
		t.Fatal(err)
	}
	// Another batch that ended: nothing to kill.
	if err := j.started("gone", runner.ProcessGroup{PGID: 999999, StartTicks: 1}); err != nil {
		t.Fatal(err)
	}
	if err := j.ended(runner.ProcessGroup{PGID: 999999, StartTicks: 1}); err != nil {
		t.Fatal(err)
	}
	j.close() // the controller is gone; its batch is not
	left, err := readGroupJournal(filepath.Join(run, groupJournalName))
	if err != nil || len(left) != 1 || left[0].Task != "left" || left[0].Start.PGID != rb.Group().PGID {
		t.Fatalf("journal holds %+v (%v), want the one batch in flight", left, err)
	}
	if n := killLeftovers(state, nil, true, zerolog.Nop()); n < 1 {
		t.Errorf("killLeftovers killed %d processes, want the batch's", n)
	}
	select {
	case <-rb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded batch still runs")
	}
	// Its orphaned member is gone too, once init has reaped it.
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(-rb.Group().PGID, 0) != syscall.ESRCH {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has members", rb.Group().PGID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(run, groupJournalName)); !os.IsNotExist(err) {
		t.Errorf("the handled journal is still there: %v", err)
	}
}

// TestGroupJournalCompacts: past journalCompactAt the journal is rewritten
// with the groups in flight only, and what is appended after still reads.
func TestGroupJournalCompacts(t *testing.T) {
	run := t.TempDir()
	path := filepath.Join(run, groupJournalName)
	j := newGroupJournal(run)
	defer j.close()
	live := runner.ProcessGroup{PGID: 7, StartTicks: 70, BootID: "b"}
	if err := j.started("long", live); err != nil {
		t.Fatal(err)
	}
	var maxSize int64
	for i := range 20000 {
		pg := runner.ProcessGroup{PGID: 1000 + i, StartTicks: uint64(i), BootID: "b"}
		if err := j.started("short", pg); err != nil {
			t.Fatal(err)
		}
		if err := j.ended(pg); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err == nil {
			maxSize = max(maxSize, st.Size())
		}
	}
	if maxSize > journalCompactAt+4096 {
		t.Errorf("journal grew to %d bytes, want it compacted near %d", maxSize, journalCompactAt)
	}
	late := runner.ProcessGroup{PGID: 8, StartTicks: 80}
	if err := j.started("late", late); err != nil {
		t.Fatal(err)
	}
	got, err := readGroupJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Start.PGID+got[1].Start.PGID != 15 {
		t.Errorf("journal reads %+v, want the groups 7 and 8 in flight", got)
	}
}

// TestGroupJournalSkipsATornLine: a line cut short (a full disk) is
// skipped; the lines around it count.
func TestGroupJournalSkipsATornLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), groupJournalName)
	data := `{"task":"a","start":{"pgid":5,"startTicks":50}}
{"task":"b","start":{"pgid":6,"startTicks":60}}
{"end":{"pgid":5,"startTicks":50}}
{"end":{"pgid":6,"startTicks":61}}
{"task":"c","start":{"pgid":7,"sta`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readGroupJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	// The end of 6 names another start time: a reused pid, not this group.
	if len(got) != 1 || got[0].Task != "b" {
		t.Errorf("journal reads %+v, want only b in flight", got)
	}
}
