package spool

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestUnsettledCountsTheFilesBeingWritten: a manifest held open for
// writing is counted until its writer closes it (then it is read), and a
// file removed while being written stops counting.
func TestUnsettledCountsTheFilesBeingWritten(t *testing.T) {
	dir := t.TempDir()
	sp := newTestSpool(t, dir)
	open := func(name string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("apiVersion: lardon3d.io/v1alpha1\nkind: Task\n"); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a, b := open("a.yaml"), open("b.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = sp.Run(ctx) }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (unsettled %d)", what, sp.Unsettled())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for ev := range sp.Events() {
		if ev.Type == Synced {
			break
		}
	}
	waitFor("two files being written", func() bool { return sp.Unsettled() == 2 })
	if _, err := a.WriteString("metadata: {name: a}\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n"); err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	ev := <-sp.Events()
	if ev.Type != Added || ev.Name != "a" {
		t.Fatalf("after a's writer closed: %+v", ev)
	}
	waitFor("one file being written", func() bool { return sp.Unsettled() == 1 })
	_ = b.Close()
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor("none", func() bool { return sp.Unsettled() == 0 })
}
