package spool

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestReaderReadsWhatTheJudgedPathReads: the short way a Reader takes for
// a plain file gives what the whole way gives (content, size limit), and
// everything else still goes the whole way.
func TestReaderReadsWhatTheJudgedPathReads(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", appendManifest)
	write("empty.yaml", "")
	write("max.yaml", strings.Repeat("x", 64))
	write("over.yaml", strings.Repeat("x", 65))
	if err := os.Symlink("a.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	rd, err := OpenReader(dir, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for name, want := range map[string]string{"empty.yaml": "", "max.yaml": strings.Repeat("x", 64)} {
		if got, err := rd.Read(name); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := rd.Read("over.yaml"); !errors.Is(err, ErrTooLarge) {
		t.Errorf("65 bytes under a 64-byte limit: %v, want ErrTooLarge", err)
	}
	if _, err := rd.Read("missing.yaml"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v, want ErrNotExist", err)
	}
	big, err := OpenReader(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	for _, name := range []string{"a.yaml", "link.yaml"} {
		if got, err := big.Read(name); err != nil || string(got) != appendManifest {
			t.Errorf("%s: %q, %v; want the manifest", name, got, err)
		}
	}
}

// TestReaderWhileAppended: reads of a file another goroutine appends to
// each give a prefix of what it ends as, never an error or a byte that was
// not written.
func TestReaderWhileAppended(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(path, []byte(appendManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	rd, err := OpenReader(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var final bytes.Buffer
	final.WriteString(appendManifest)
	var wg sync.WaitGroup
	wg.Go(func() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for i := range 2000 {
			line := "# comment " + strings.Repeat("y", i%97) + "\n"
			if _, err := f.WriteString(line); err != nil {
				t.Error(err)
				return
			}
			final.WriteString(line)
		}
	})
	var reads [][]byte
	for range 2000 {
		got, err := rd.Read("a.yaml")
		if err != nil {
			t.Fatalf("read while appended: %v", err)
		}
		reads = append(reads, got)
	}
	wg.Wait()
	for _, got := range reads {
		if !bytes.HasPrefix(final.Bytes(), got) {
			t.Fatalf("a read is not a prefix of the file:\n%q", got)
		}
	}
}
