//go:build lardon3d_vm

// Package vm boots a real Debian 12 kernel with systemd and cgroup v2 in
// a virtual machine (hack/vm/image.sh, boot.sh) and runs lardon3d-controller
// there in each setup people start it in, with the tasks that try to break
// its contract (guest/). `make test-vm` runs it; `make test` too, once the
// image is built.
package vm

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// setups and scenarios are what the guest must report, each once.
var (
	setups = []string{"root-delegated-unit", "user-delegated-unit", "root-shell-in-unit", "user-manager", "user-login-shell",
		"system-unit-file", "system-unit-file-user-spool", "user-unit-file"}
	scenarios = []string{"burst", "setsid-alloc", "setsid-delete", "setsid-pause", "pids-max", "leave-cgroup", "setup-line", "kill9-restart"}
	// extra are the scenarios of one setup only.
	extra = map[string][]string{"system-unit-file-user-spool": {"runs-as-owner"}}
)

type result struct {
	Setup    string `json:"setup"`
	Scenario string `json:"scenario"`
	OK       bool   `json:"ok"`
	Detail   string `json:"detail"`
	Cgroups  string `json:"cgroups"`
}

func TestControllerOnCgroupV2WithSystemd(t *testing.T) {
	image := os.Getenv("LARDON3D_VM_IMAGE")
	if image == "" {
		t.Fatal("LARDON3D_VM_IMAGE is not set: run `make test-vm` (it builds the image once with hack/vm/image.sh)")
	}
	share := t.TempDir()
	if err := os.Chmod(share, 0o755); err != nil {
		t.Fatal(err)
	}
	for pkg, out := range map[string]string{"../../cmd/lardon3d-controller": "lardon3d-controller", "./guest": "guest"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(share, out), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, b)
		}
	}
	if b, err := exec.Command("cp", "-r", "../../deploy/systemd", filepath.Join(share, "units")).CombinedOutput(); err != nil {
		t.Fatalf("copy the unit files: %v: %s", err, b)
	}
	// LARDON3D_VM_ONLY runs the setups whose name contains it (a rerun
	// of one while working on it); the others then report nothing.
	only := os.Getenv("LARDON3D_VM_ONLY")
	script := `#!/bin/sh
/mnt/host/guest setups --bin /mnt/host/lardon3d-controller --units /mnt/host/units --out /mnt/host/results.jsonl --only '` + only + `'
echo $? > /mnt/host/guest.status
`
	if err := os.WriteFile(filepath.Join(share, "guest.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	boot := exec.Command("bash", "boot.sh", image, share)
	out, err := boot.CombinedOutput()
	t.Logf("the virtual machine ran %s", time.Since(start).Round(time.Second))
	if guestLog, rerr := os.ReadFile(filepath.Join(share, "guest.log")); rerr == nil {
		t.Logf("guest log:\n%s", guestLog)
	}
	if err != nil {
		t.Fatalf("boot.sh: %v\n%s", err, out)
	}
	got := map[string]result{}
	f, err := os.Open(filepath.Join(share, "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("results.jsonl: %v: %s", err, sc.Bytes())
		}
		got[r.Setup+"/"+r.Scenario] = r
	}
	for _, s := range setups {
		if !strings.Contains(s, only) {
			continue
		}
		t.Run(s, func(t *testing.T) {
			for _, sc := range append(slices.Clone(scenarios), extra[s]...) {
				t.Run(sc, func(t *testing.T) {
					r, ok := got[s+"/"+sc]
					switch {
					case !ok:
						t.Fatalf("the guest reported nothing for %s/%s", s, sc)
					case !r.OK:
						t.Fatalf("%s", r.Detail)
					}
					t.Log(r.Detail)
					if sc == "setup-line" && (s == "root-shell-in-unit" || s == "user-manager" || s == "user-login-shell") &&
						!strings.Contains(r.Detail, "scope") {
						t.Errorf("the controller of %s should run in a delegated scope of its own: %s", s, r.Detail)
					}
				})
			}
		})
	}
}
