package kernfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenFileAgreesWithOS: OpenFile creates, appends, refuses and fails
// as os.OpenFile does, and its descriptors are close-on-exec.
func TestOpenFileAgreesWithOS(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	f, err := OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o640&^umask() {
		t.Errorf("created %v (%v), want mode %v", st.Mode(), err, os.FileMode(0o640&^umask()))
	}
	f, err = OpenFile(p, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0)
	if err != nil {
		t.Fatal(err)
	}
	fdFlags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil || fdFlags&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor flags %#x (%v): not close-on-exec", fdFlags, err)
	}
	_, _ = f.Write([]byte("two\n"))
	_ = f.Close()
	if got, _ := os.ReadFile(p); string(got) != "one\ntwo\n" {
		t.Errorf("appended file holds %q", got)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		flag int
		want error
	}{
		{p, os.O_WRONLY | os.O_CREATE | os.O_EXCL, fs.ErrExist},
		{filepath.Join(dir, "none"), os.O_RDONLY, fs.ErrNotExist},
		{link, os.O_WRONLY | unix.O_NOFOLLOW, syscall.ELOOP},
	} {
		_, err := OpenFile(c.name, c.flag, 0o600)
		_, ref := os.OpenFile(c.name, c.flag, 0o600)
		var pe *fs.PathError
		if !errors.Is(err, c.want) || !errors.As(err, &pe) || err.Error() != ref.Error() {
			t.Errorf("%s: %v, want %v as os.OpenFile's %v", c.name, err, c.want, ref)
		}
	}
	d, err := OpenFile(dir, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if names, err := d.Readdirnames(-1); err != nil || len(names) != 2 {
		t.Errorf("directory listed as %v (%v), want f and link", names, err)
	}
}

// TestOpenFileLeavesThePollerOut: a pseudo-file that os.OpenFile would
// put in non-blocking mode for the poller is left blocking, and reads.
func TestOpenFileLeavesThePollerOut(t *testing.T) {
	const path = "/proc/self/mounts" // polled for mount changes
	ref, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	f, err := OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nonblock := func(f *os.File) bool {
		var flags int
		rc, _ := f.SyscallConn()
		_ = rc.Control(func(fd uintptr) { flags, _ = unix.FcntlInt(fd, unix.F_GETFL, 0) })
		return flags&unix.O_NONBLOCK != 0
	}
	if !nonblock(ref) {
		t.Fatalf("os.Open left %s blocking: the poller is not what this test tells apart", path)
	}
	if nonblock(f) {
		t.Errorf("OpenFile put %s in non-blocking mode: it is registered with the poller", path)
	}
	if buf := make([]byte, 64); true {
		if n, err := f.Read(buf); err != nil || n == 0 {
			t.Errorf("read %d bytes: %v", n, err)
		}
	}
}

// BenchmarkOpenFile compares OpenFile with os.OpenFile on a regular file
// opened to append, as a batch's log is, and closed
// (go test -bench OpenFile ./pkg/kernfile).
func BenchmarkOpenFile(b *testing.B) {
	p := filepath.Join(b.TempDir(), "log")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		b.Fatal(err)
	}
	flag := os.O_WRONLY | os.O_APPEND | unix.O_NOFOLLOW
	for _, c := range []struct {
		name string
		open func(string, int, os.FileMode) (*os.File, error)
	}{{"kernfile", OpenFile}, {"os", os.OpenFile}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				f, err := c.open(p, flag, 0)
				if err != nil {
					b.Fatal(err)
				}
				_ = f.Close()
			}
		})
	}
}

func umask() os.FileMode {
	m := unix.Umask(0)
	unix.Umask(m)
	return os.FileMode(m)
}
