package runner

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openInherited opens path as a descriptor without close-on-exec, as one
// inherited from a parent shell (`exec 7<secret`) is; closed at cleanup.
func openInherited(t *testing.T, path string, flags int) int {
	t.Helper()
	fd, err := unix.Open(path, flags, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(fd) })
	if cloexec(t, fd) {
		t.Fatalf("fd %d opened close-on-exec", fd)
	}
	return fd
}

// cloexec reports whether fd has FD_CLOEXEC.
func cloexec(t *testing.T, fd int) bool {
	t.Helper()
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		t.Fatalf("fcntl %d: %v", fd, err)
	}
	return flags&unix.FD_CLOEXEC != 0
}

// Both ways (close_range, and the /proc/self/fd walk of older kernels)
// mark every descriptor above 2 close-on-exec, and leave 0, 1 and 2 as
// they were.
func TestCloseOnExecInheritedMarksEveryDescriptorAbove2(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	std := map[int]bool{}
	for fd := range 3 {
		std[fd] = cloexec(t, fd)
	}
	for name, mark := range map[string]func() error{
		"close_range":   CloseOnExecInherited,
		"/proc/self/fd": func() error { return closeOnExecListed("/proc/self/fd") },
	} {
		a := openInherited(t, secret, unix.O_RDONLY)
		b, err := unix.Dup(a) // dup clears the flag
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Close(b) })
		if err := mark(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, fd := range []int{a, b} {
			if !cloexec(t, fd) {
				t.Errorf("%s: fd %d left without close-on-exec", name, fd)
			}
		}
		for fd, was := range std {
			if cloexec(t, fd) != was {
				t.Errorf("%s: fd %d's close-on-exec changed", name, fd)
			}
		}
	}
	if err := closeOnExecListed(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a descriptor list that cannot be read is no error")
	}
}

// A batch gets its output and nothing else the controller holds: a
// descriptor on a secret file and one appending to a root-owned file,
// both held without close-on-exec (as a root shell's `exec 7<secret
// 8>>file` leaves them), are not among its descriptors; it can neither
// read the one nor write the other.
func TestABatchInheritsNoDescriptorOfTheController(t *testing.T) {
	dir := t.TempDir()
	secret, appended := filepath.Join(dir, "secret"), filepath.Join(dir, "appended")
	if err := os.WriteFile(secret, []byte("the-secret-bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(appended, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := openInherited(t, secret, unix.O_RDONLY)
	w := openInherited(t, appended, unix.O_WRONLY|unix.O_APPEND)
	rs, ws := strconv.Itoa(r), strconv.Itoa(w)
	s := testSpec(t, "sh", "-c", `ls -l /proc/$$/fd; for fd in $(ls /proc/$$/fd); do echo "fd $fd"; done; cat <&`+rs+`; echo pwned >&`+ws+`; exit 0`)
	res := start(t, s).Wait()
	log := readLog(t, s)
	if res.ExitCode != 0 {
		t.Fatalf("result %+v, log:\n%s", res, log)
	}
	if strings.Contains(log, "the-secret-bytes") || strings.Contains(log, secret) || strings.Contains(log, appended) {
		t.Errorf("the batch reached the controller's descriptors:\n%s", log)
	}
	for _, fd := range []string{rs, ws} {
		if strings.Contains(log, "\nfd "+fd+"\n") {
			t.Errorf("the batch holds fd %s:\n%s", fd, log)
		}
	}
	if got, _ := os.ReadFile(appended); string(got) != "root's\n" {
		t.Errorf("the batch wrote to the controller's file: %q", got)
	}
}
