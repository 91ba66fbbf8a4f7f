package runner

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// inodeOf is the inode number of the file at path.
func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestItemsFilesRecycleTheirInode: with Spares, the items files of
// successive batches (of any task) are one pool file rewritten in place,
// each holding its own batch's items when its command reads it; a failed
// batch keeps its items under TASK.batch-INDEX.items, out of the pool; a
// new pool adopts the pool files an earlier process left.
func TestItemsFilesRecycleTheirInode(t *testing.T) {
	spares := NewSpares()
	s := testSpec(t, "sh", "-c", `cat "$LARDON3D_ITEMS_FILE"; ls -i "$LARDON3D_ITEMS_FILE"`)
	s.Spares = spares
	var inodes []string
	var pooled string
	for i, items := range [][]string{{"a", "b", "c"}, {"d"}, {"e", "f"}} {
		s.Task, s.BatchIndex, s.Items = []string{"t1", "t2", "t1"}[i], int64(i), items
		b := start(t, s)
		if res := b.Wait(); res.ExitCode != 0 {
			t.Fatalf("batch %d: %+v", i, res)
		}
		if i == 0 {
			pooled = b.ItemsFile()
		} else if b.ItemsFile() != pooled {
			t.Errorf("batch %d's items file %s, want the pool file %s", i, b.ItemsFile(), pooled)
		}
		log := readLog(t, s)
		if !strings.Contains(log, strings.Join(items, "\n")+"\n") {
			t.Errorf("batch %d read other items than %v:\n%s", i, items, log)
		}
		for _, l := range strings.Split(strings.TrimSpace(log), "\n") {
			if strings.HasSuffix(l, b.ItemsFile()) {
				inodes = append(inodes, strings.Fields(l)[0])
			}
		}
		if data, err := os.ReadFile(pooled); err != nil || string(data) != strings.Join(items, "\n")+"\n" {
			t.Errorf("batch %d: the pool file holds %q (%v), cut to its items", i, data, err)
		}
	}
	// The log holds every batch's line so far: 1, then 2, then 3.
	if len(inodes) != 6 || strings.Count(strings.Join(inodes, " "), inodes[0]) != 6 {
		t.Errorf("items files' inodes %v, want one inode for the three batches", inodes)
	}
	ino := inodeOf(t, pooled)

	// A failed batch keeps its file, the pool's inode under its own name.
	s.Task, s.BatchIndex, s.Items, s.Command = "t3", 0, []string{"x"}, []string{"false"}
	b := start(t, s)
	if res := b.Wait(); res.ExitCode != 1 {
		t.Fatalf("failed batch: %+v", res)
	}
	if want := filepath.Join(s.RunDir, itemsFileName("t3", 0)); b.ItemsFile() != want {
		t.Errorf("the failed batch's items file is %s, want %s", b.ItemsFile(), want)
	}
	if got := inodeOf(t, b.ItemsFile()); got != ino {
		t.Errorf("the failed batch's file has inode %d, want the pool file's %d", got, ino)
	}
	if data, err := os.ReadFile(b.ItemsFile()); err != nil || string(data) != "x\n" {
		t.Errorf("failed batch's items file %q (%v), want \"x\\n\"", data, err)
	}
	if _, err := os.Stat(pooled); !os.IsNotExist(err) {
		t.Errorf("the pool file is still there after a failed batch took it: %v", err)
	}

	// A pool of a later process adopts what is left in the directory.
	left := filepath.Join(s.RunDir, "items-0123abcd-1")
	if err := os.Rename(b.ItemsFile(), left); err != nil {
		t.Fatal(err)
	}
	s.Spares, s.Task, s.Command = NewSpares(), "t4", []string{"true"}
	b = start(t, s)
	if b.ItemsFile() != left || inodeOf(t, left) != ino {
		t.Errorf("a new pool's first file is %s, want the adopted %s", b.ItemsFile(), left)
	}
	b.Wait()
}

// TestItemsFilesWithoutSpares: without a pool each file is created under
// TASK.batch-INDEX.items and unlinked after success.
func TestItemsFilesWithoutSpares(t *testing.T) {
	s := testSpec(t, "true")
	b := start(t, s)
	if want := filepath.Join(s.RunDir, itemsFileName(s.Task, s.BatchIndex)); b.ItemsFile() != want {
		t.Errorf("items file %s, want %s", b.ItemsFile(), want)
	}
	b.Wait()
	ents, err := os.ReadDir(s.RunDir)
	if err != nil || len(ents) != 0 {
		t.Errorf("run directory holds %v (%v), want nothing", ents, err)
	}
}

// TestItemsKeptByAFailureGoOnSuccess: the items a failed attempt kept are
// removed once an attempt of the same batch succeeds.
func TestItemsKeptByAFailureGoOnSuccess(t *testing.T) {
	s := testSpec(t, "false")
	s.Spares = NewSpares()
	b := start(t, s)
	b.Wait()
	kept := filepath.Join(s.RunDir, itemsFileName(s.Task, s.BatchIndex))
	if b.ItemsFile() != kept {
		t.Fatalf("failed attempt's items at %s, want %s", b.ItemsFile(), kept)
	}
	s.Command, s.Attempt = []string{"true"}, 2
	b = start(t, s)
	if res := b.Wait(); res.ExitCode != 0 {
		t.Fatalf("second attempt: %+v", res)
	}
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Errorf("the failed attempt's items are still kept after a success: %v", err)
	}
}
