package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWrapReportsThePeakAndTheExit: the command's exit code (128+N for a
// signal) is the wrapper's, and the peak of the cgroup is appended to the
// termination message, after what the command wrote there.
func TestWrapReportsThePeakAndTheExit(t *testing.T) {
	for _, tc := range []struct {
		name, file, value string
		script            string
		code              int
		want              string
	}{
		{"v2", "memory.peak", "123456789\n", "echo mine > $LARDON3D_TERMINATION_LOG; exit 3", 3, "mine\n\n" + PeakPrefix + "123456789\n"},
		{"v1", filepath.Join("memory", "memory.max_usage_in_bytes"), "4096", "exit 0", 0, "\n" + PeakPrefix + "4096\n"},
		{"killed by a signal", "memory.peak", "7", "kill -TERM $$", 128 + 15, "\n" + PeakPrefix + "7\n"},
		{"no cgroup file", "", "", "exit 1", 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			if tc.file != "" {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, tc.file)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, tc.file), []byte(tc.value), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			term := filepath.Join(dir, "termination-log")
			t.Setenv("LARDON3D_TERMINATION_LOG", term)
			var stderr bytes.Buffer
			if code := wrap([]string{"sh", "-c", tc.script}, root, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d (%s)", code, tc.code, stderr.String())
			}
			got, _ := os.ReadFile(term)
			if string(got) != tc.want {
				t.Errorf("termination message %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWrapMissingCommandIs127(t *testing.T) {
	var stderr bytes.Buffer
	if code := wrap([]string{"lardon3d-no-such-command"}, t.TempDir(), &stderr); code != 127 || !strings.Contains(stderr.String(), "lardon3d-no-such-command") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestInstallCopiesItself(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "wrap")
	if code := run([]string{"--install", dest}, os.Stderr); code != 0 {
		t.Fatalf("install exit %d", code)
	}
	self, _ := os.Executable()
	a, _ := os.ReadFile(self)
	b, err := os.ReadFile(dest)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("the copy differs from the executable (%v)", err)
	}
	if st, _ := os.Stat(dest); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", st.Mode())
	}
}
