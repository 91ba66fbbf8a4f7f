package probe

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hog starts python3 holding mib MiB, with env added, and waits until
// it holds them.
func hog(t *testing.T, mib int, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("python3", "-c", fmt.Sprintf(`
import sys, time
b = bytearray(%d << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
print("held", flush=True)
time.sleep(120)
`, mib))
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3 allocates the memory: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("hog: %q, %v", line, err)
	}
	return cmd
}

func pidsOf(ps []ProcessMemory) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.PID
	}
	return out
}

// The largest processes, by RSS, the marked ones (the batches) left out;
// within a cgroup domain, only its processes.
func TestTopProcesses(t *testing.T) {
	batch := hog(t, 96, "LARDON3D_TEST_MARK=1")
	user := hog(t, 64)
	all, err := TopProcesses("", 1<<20, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pidsOf(all), batch.Process.Pid) || !slices.Contains(pidsOf(all), user.Process.Pid) {
		t.Fatalf("unmarked listing lacks one of the hogs")
	}
	for i := 1; i < len(all); i++ {
		if all[i].RSS > all[i-1].RSS {
			t.Fatalf("not largest first: %+v before %+v", all[i-1], all[i])
		}
	}
	outside, err := TopProcesses("", 1<<20, "LARDON3D_TEST_MARK=", "")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(pidsOf(outside), user.Process.Pid)
	if slices.Contains(pidsOf(outside), batch.Process.Pid) || i < 0 {
		t.Fatalf("the marked process listed, or the user's missing: %v", pidsOf(outside))
	}
	if p := outside[i]; p.Comm != "python3" || p.RSS < 64<<20 {
		t.Errorf("user's program %+v, want python3 with at least 64 MiB", p)
	}

	// A domain: a v1 memory cgroup holding only the user's program.
	self, _ := os.ReadFile("/proc/self/cgroup")
	var rel string
	for _, line := range strings.Split(string(self), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && strings.Contains(","+parts[1]+",", ",memory,") {
			rel = parts[2]
		}
	}
	base := filepath.Join(DefaultCgroupRoot, "memory", rel)
	dom := filepath.Join(base, fmt.Sprintf("lardon3d-top-test-%d", os.Getpid()))
	if rel == "" || os.Mkdir(dom, 0o755) != nil {
		t.Log("no v1 memory cgroup to make here: the domain is not tried")
		return
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(base, "cgroup.procs"), []byte(strconv.Itoa(user.Process.Pid)), 0)
		for range 100 {
			if os.Remove(dom) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("remove %s", dom)
	})
	if err := os.WriteFile(filepath.Join(dom, "cgroup.procs"), []byte(strconv.Itoa(user.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	in, err := TopProcesses("", 10, "", dom)
	if err != nil {
		t.Fatal(err)
	}
	if got := pidsOf(in); len(got) != 1 || got[0] != user.Process.Pid {
		t.Errorf("domain listing %v, want only the user's program %d", got, user.Process.Pid)
	}
}
