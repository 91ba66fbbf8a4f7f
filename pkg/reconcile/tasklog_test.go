package reconcile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// The log's path is the state directory's, by the task's name; a name
// that is no task's (a path, "..", upper case, empty) has none, and so
// does a spool without a state directory.
func TestTaskLogPathIsTheStateDirectorysOnly(t *testing.T) {
	if got := TaskLogPath("/var/lib/s", "ns.job-1"); got != "/var/lib/s/logs/ns.job-1.log" {
		t.Errorf("TaskLogPath = %q", got)
	}
	for _, name := range []string{"", ".", "..", "../../etc/shadow", "a/b", "/etc/shadow", "A", "x\x00", strings.Repeat("a", 252)} {
		if got := TaskLogPath("/var/lib/s", name); got != "" {
			t.Errorf("name %q: path %q, want none", name, got)
		}
	}
	if got := TaskLogPath("", "job"); got != "" {
		t.Errorf("no state directory: path %q, want none", got)
	}
}

// OpenTaskLog reads what the controller wrote and nothing put in its
// place: a link to a root-only file (as the log, or as the logs
// directory), a FIFO (which would hang the reader), a directory.
func TestOpenTaskLogOpensOnlyTheControllersFile(t *testing.T) {
	state := t.TempDir()
	logs := filepath.Join(state, "logs")
	if err := os.Mkdir(logs, 0o750); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "secret.log")
	if err := os.WriteFile(secret, []byte("root:*:20228:0:99999:7:::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logs, "job.log"), []byte("=== batch 0 ===\nhello\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logs, "job.log"+runner.RotatedLogSuffix), []byte("older\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	read := func(name string, rotated bool) (string, error) {
		f, err := OpenTaskLog(state, name, rotated)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}
	if got, err := read("job", false); err != nil || got != "=== batch 0 ===\nhello\n" {
		t.Errorf("the log: %q, %v", got, err)
	}
	if got, err := read("job", true); err != nil || got != "older\n" {
		t.Errorf("its rotated part: %q, %v", got, err)
	}
	if _, err := read("none", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no log yet: %v, want fs.ErrNotExist", err)
	}
	if _, err := read("../job", false); !errors.Is(err, ErrNotATaskLog) {
		t.Errorf("a name that is a path: %v, want ErrNotATaskLog", err)
	}
	if err := os.Symlink(secret, filepath.Join(logs, "link.log")); err != nil {
		t.Fatal(err)
	}
	if got, err := read("link", false); !errors.Is(err, ErrNotATaskLog) || strings.Contains(got, "root:") {
		t.Errorf("a link in the log's place: %q, %v, want ErrNotATaskLog", got, err)
	}
	if err := os.Mkdir(filepath.Join(logs, "dir.log"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := read("dir", false); !errors.Is(err, ErrNotATaskLog) {
		t.Errorf("a directory in the log's place: %v, want ErrNotATaskLog", err)
	}
	if err := syscall.Mkfifo(filepath.Join(logs, "fifo.log"), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := read("fifo", false); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotATaskLog) {
			t.Errorf("a FIFO in the log's place: %v, want ErrNotATaskLog", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("opening a FIFO in the log's place hung")
	}
	// The logs directory swapped for a link to a directory of root's.
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "shadow.log"), []byte("root:*:\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	linked := t.TempDir()
	if err := os.Symlink(other, filepath.Join(linked, "logs")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenTaskLog(linked, "shadow", false); !errors.Is(err, ErrNotATaskLog) {
		t.Errorf("logs a link: %v, want ErrNotATaskLog", err)
	}
}

// Another user's file in the log's place is not read (the controller
// writes its logs as itself).
func TestOpenTaskLogRefusesAnotherUsersFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the file to another user (CI runs as root)")
	}
	state := t.TempDir()
	logs := filepath.Join(state, "logs")
	if err := os.Mkdir(logs, 0o750); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(logs, "job.log")
	if err := os.WriteFile(p, []byte("planted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if f, err := OpenTaskLog(state, "job", false); !errors.Is(err, ErrNotATaskLog) {
		if f != nil {
			f.Close()
		}
		t.Errorf("another user's file: %v, want ErrNotATaskLog", err)
	}
}
