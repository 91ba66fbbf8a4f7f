package history

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func accidentStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(Entry{Profile: "p", Record: Record{Time: time.Unix(1, 0), Items: 1, PeakMemoryBytes: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// Pages scribbled over the open file: Append returns ErrCorrupt, never
// panics (bbolt does, on invalid meta pages).
func TestAppendToAScribbledStoreIsAnError(t *testing.T) {
	s, path := accidentStore(t)
	junk := make([]byte, 16*4096)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	if err := os.WriteFile(path, junk, 0o600); err != nil {
		t.Fatal(err)
	}
	err := s.Append(Entry{Profile: "p", Record: Record{Time: time.Unix(2, 0), Items: 1}})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Append to a scribbled store: %v, want ErrCorrupt", err)
	}
}

// The file removed, or replaced, while open: Append returns ErrGone.
func TestAppendToARemovedStoreIsAnError(t *testing.T) {
	s, path := accidentStore(t)
	defer s.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(Entry{Profile: "p", Record: Record{Time: time.Unix(2, 0), Items: 1}}); !errors.Is(err, ErrGone) {
		t.Fatalf("Append to a removed store: %v, want ErrGone", err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(Entry{Profile: "p", Record: Record{Time: time.Unix(3, 0), Items: 1}}); !errors.Is(err, ErrGone) {
		t.Fatalf("Append to a replaced store: %v, want ErrGone", err)
	}
}
