package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestASpoolWithoutInotifyIsListed: with the user's inotify instances
// exhausted (other programs hold them), run exited 2. The spool runs on,
// listed every second: a manifest dropped is seen.
func TestASpoolWithoutInotifyIsListed(t *testing.T) {
	old := watchSpool
	watchSpool = func(string) (*dirWatch, error) { return nil, fmt.Errorf("inotify: %w", unix.EMFILE) }
	t.Cleanup(func() { watchSpool = old })
	dir := t.TempDir()
	sp := newTestSpool(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- sp.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if ev := <-sp.Events(); ev.Type != Synced {
		t.Fatalf("first event %v, want Synced", ev.Type)
	}
	body := "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: a}\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-sp.Events():
		if ev.Type != Added || ev.Name != "a" {
			t.Fatalf("got %+v, want a Added", ev)
		}
	case err := <-errc:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the manifest was not seen without inotify")
	}
}

// TestASpoolMovedBeforeItsWatchIsLost: a spool directory moved away
// between Open and Run, and a directory made anew at its path (the
// controller's start made SPOOL/.lardon3d there), is the spool lost, not
// a new one watched in its place with the old one's listing.
func TestASpoolMovedBeforeItsWatchIsLost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sp := newTestSpool(t, dir)
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".lardon3d"), 0o700); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- sp.Run(context.Background()) }()
	select {
	case err := <-errc:
		if !errors.Is(err, errDirGone) {
			t.Errorf("Run: %v, want the spool directory gone", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run watches the directory made in the spool's place")
	}
}
