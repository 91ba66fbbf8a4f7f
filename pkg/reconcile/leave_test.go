package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// A spool joined to a running host leaves it: refused while one of its
// tasks runs a batch, then done once it is settled, with its statuses
// written and nothing of it run after; the host's first spool never
// leaves; the host runs on and stops cleanly.
func TestAJoinedSpoolLeaves(t *testing.T) {
	h, _, gov := testHost(t, Config{}, 1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { _, err := h.Run(ctx); ran <- err }()
	<-h.Started()
	var stopped sync.Once
	stop := func() error {
		var err error
		stopped.Do(func() { cancel(); err = <-ran })
		return err
	}

	dir := filepath.Join(t.TempDir(), "joined")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	writeFile(t, filepath.Join(dir, "slow.yaml"), manifest("slow", "while [ ! -e "+gate+" ]; do sleep 0.05; done", "  resources: {batch: {max: 4}}\n"))
	sp, err := spool.Open(dir, spool.Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	defer func() { _ = stop() }() // before the spools close, whatever fails
	c, err := h.Join(Config{SpoolDir: dir, StateDir: filepath.Join(t.TempDir(), "state"), KillGrace: time.Second}, sp)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for gov.Budgets().Reservations == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the joined spool's task did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := h.Leave(c); err == nil || !strings.Contains(err.Error(), "hold a batch") {
		t.Fatalf("leave while a batch runs: %v", err)
	}
	h.spoolsMu.RLock()
	first := h.spools[0]
	h.spoolsMu.RUnlock()
	if err := h.Leave(first); err == nil {
		t.Error("the host's first spool left")
	}
	writeFile(t, gate, "")
	for phaseIn(t, filepath.Join(dir, "slow.yaml")) != v1alpha1.PhaseDone {
		if time.Now().After(deadline) {
			t.Fatal("the task did not end Done")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := h.Leave(c); err != nil {
		t.Fatalf("leave once settled: %v", err)
	}
	if err := h.Leave(c); err == nil {
		t.Error("a spool left twice")
	}
	writeFile(t, filepath.Join(dir, "after.yaml"), manifest("after", "true", ""))
	time.Sleep(500 * time.Millisecond)
	if p := phaseIn(t, filepath.Join(dir, "after.yaml")); p != "" {
		t.Errorf("a task dropped after the spool left: phase %q", p)
	}
	if err := stop(); err != nil {
		t.Errorf("the host's run: %v", err)
	}
	if b := gov.Budgets(); b.Reservations != 0 {
		t.Errorf("%d reservations left", b.Reservations)
	}
}

func phaseIn(t *testing.T, path string) v1alpha1.Phase {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	task, _ := v1alpha1.ParseManifest(filepath.Base(path), data)
	if task == nil {
		return ""
	}
	return task.Status.Phase
}
