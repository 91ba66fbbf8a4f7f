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
// successive batches (of any task) are one inode renamed and rewritten,
// each holding its own batch's items when its command reads it; a failed
// batch keeps its file under its name; a new pool adopts the spares an
// earlier process left.
func TestItemsFilesRecycleTheirInode(t *testing.T) {
	spares := NewSpares()
	s := testSpec(t, "sh", "-c", `cat "$LARDON3D_ITEMS_FILE"; ls -i "$LARDON3D_ITEMS_FILE"`)
	s.Spares = spares
	var inodes []string
	for i, items := range [][]string{{"a", "b"}, {"c"}, {"d", "e", "f"}} {
		s.Task, s.BatchIndex, s.Items = []string{"t1", "t2", "t1"}[i], int64(i), items
		b := start(t, s)
		if res := b.Wait(); res.ExitCode != 0 {
			t.Fatalf("batch %d: %+v", i, res)
		}
		if _, err := os.Stat(b.ItemsFile()); !os.IsNotExist(err) {
			t.Errorf("batch %d: items file %s still under its name after success (%v)", i, b.ItemsFile(), err)
		}
		log := readLog(t, s)
		if !strings.Contains(log, strings.Join(items, "\n")+"\n") {
			t.Errorf("batch %d read other items than %v:\n%s", i, items, log)
		}
		lines := strings.Split(strings.TrimSpace(log), "\n")
		for _, l := range lines {
			if strings.HasSuffix(l, b.ItemsFile()) {
				inodes = append(inodes, strings.Fields(l)[0])
			}
		}
	}
	if len(inodes) != 3 || inodes[0] != inodes[1] || inodes[1] != inodes[2] {
		t.Errorf("items files' inodes %v, want one inode for the three batches", inodes)
	}
	spareNames, _ := filepath.Glob(filepath.Join(s.RunDir, sparePrefix+"*"))
	if len(spareNames) != 1 {
		t.Fatalf("spares %v, want one", spareNames)
	}
	spareIno := inodeOf(t, spareNames[0])

	// A failed batch keeps its file, the spare's inode under its name.
	s.Task, s.BatchIndex, s.Items, s.Command = "t3", 0, []string{"x"}, []string{"false"}
	b := start(t, s)
	if res := b.Wait(); res.ExitCode != 1 {
		t.Fatalf("failed batch: %+v", res)
	}
	if got := inodeOf(t, b.ItemsFile()); got != spareIno {
		t.Errorf("the failed batch's file has inode %d, want the spare's %d", got, spareIno)
	}
	data, err := os.ReadFile(b.ItemsFile())
	if err != nil || string(data) != "x\n" {
		t.Errorf("failed batch's items file %q (%v), want \"x\\n\"", data, err)
	}

	// A pool of a later process adopts what is left in the directory.
	if err := os.Rename(b.ItemsFile(), filepath.Join(s.RunDir, sparePrefix+"old-1")); err != nil {
		t.Fatal(err)
	}
	s.Spares, s.Task, s.Command = NewSpares(), "t4", []string{"true"}
	b = start(t, s)
	path := b.ItemsFile()
	if got := inodeOf(t, path); got != spareIno {
		t.Errorf("a new pool's first file has inode %d, want the adopted spare's %d", got, spareIno)
	}
	b.Wait()
}

// TestItemsFilesWithoutSpares: without a pool each file is created and
// unlinked after success.
func TestItemsFilesWithoutSpares(t *testing.T) {
	s := testSpec(t, "true")
	b := start(t, s)
	b.Wait()
	ents, err := os.ReadDir(s.RunDir)
	if err != nil || len(ents) != 0 {
		t.Errorf("run directory holds %v (%v), want nothing", ents, err)
	}
}
