package kernfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestReadAgreesWithOS: what Read returns is what os.ReadFile returns, for
// pseudo-files of several kinds and for a regular file larger than the
// first buffer; a missing file is fs.ErrNotExist, a directory an error.
func TestReadAgreesWithOS(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big")
	want := bytes.Repeat([]byte("0123456789abcdef"), 3*initialSize/16+5)
	if err := os.WriteFile(big, want, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/proc/self/status", "/proc/sys/kernel/pid_max", "/proc/version", big} {
		got, err := Read(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		ref, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if path == "/proc/self/status" {
			// Another process reads it each time: compare the stable part.
			got, ref = got[:bytes.IndexByte(got, '\n')], ref[:bytes.IndexByte(ref, '\n')]
		}
		if !bytes.Equal(got, ref) {
			t.Errorf("%s: read %q, os.ReadFile %q", path, got, ref)
		}
	}
	if got, _ := Read(big); !bytes.Equal(got, want) {
		t.Errorf("a file of %d bytes read as %d bytes", len(want), len(got))
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := Read(t.TempDir()); err == nil {
		t.Error("a directory read without an error")
	}
	if _, err := Read("/proc/self/environ"); err != nil {
		t.Errorf("own environment: %v", err)
	}
}

// BenchmarkRead compares Read with os.ReadFile on the files the
// controller reads per batch (go test -bench Read ./pkg/kernfile).
func BenchmarkRead(b *testing.B) {
	for _, path := range []string{"/proc/self/stat", "/proc/sys/kernel/ns_last_pid", "/proc/self/environ", "/proc/meminfo"} {
		b.Run("kernfile"+path, func(b *testing.B) {
			for b.Loop() {
				if _, err := Read(path); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("os"+path, func(b *testing.B) {
			for b.Loop() {
				if _, err := os.ReadFile(path); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
