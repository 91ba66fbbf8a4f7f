package kubetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/podrunner"
)

// Node is a real Kubernetes node registered with an Env's API server: a
// kubelet (built by hack/kube-test-binaries.sh, the control plane's
// release) over containerd and runc (Debian's packages), with the images
// of Images imported from local files. It runs host-network Pods only: no
// CNI plugin is installed, so the node never reports its network ready,
// which the kubelet requires of other Pods alone.
type Node struct {
	// Name is the Node's name (the kubelet's --hostname-override).
	Name string
	// Dir holds containerd's and the kubelet's state.
	Dir string
	// Containerd is the address of containerd's socket.
	Containerd string
}

// The images every Node has: a busybox root file system with the synthetic
// workload (cmd/lardon3d-synth) as /bin/lardon3d-synth and the batch Pods'
// wrapper (cmd/lardon3d-podwrap) at podrunner.WrapperPath, and the sandbox ("pause")
// image made of the same layer.
const (
	BatchImage = "lardon3d.test/batch:1"
	PauseImage = "lardon3d.test/pause:1"
)

// StartNode starts containerd and a kubelet named name against env, imports
// the test images and waits until the Node is registered; t.Cleanup stops
// both and removes every Pod container they started. It needs root,
// containerd, runc, ctr and a static busybox (/bin/busybox); a missing one
// fails the test, naming what to install. Test nodes of every test binary
// of the machine start one at a time (a file lock held until cleanup).
func StartNode(t testing.TB, env *Env, name string) *Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("kubetest: a kubelet needs root")
	}
	for _, bin := range []string{"containerd", "runc", "ctr", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("kubetest: %s is not installed (apt-get install containerd runc): %v", bin, err)
		}
	}
	kubelet := filepath.Join(Assets(t), "kubelet")
	if _, err := os.Stat(kubelet); err != nil {
		t.Fatalf("kubetest: no kubelet beside kube-apiserver (run hack/kube-test-binaries.sh): %v", err)
	}
	// One test node at a time on this machine, whatever the test binary:
	// kubelets of the cgroupfs driver share the kubepods cgroups, and each
	// removes what it does not know there.
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "lardon3d-kubetest-node.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() }) // registered first: runs last
	// A short directory: unix socket paths hold at most 107 bytes.
	dir, err := os.MkdirTemp("", "l3node")
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{Name: name, Dir: dir, Containerd: filepath.Join(dir, "containerd.sock")}
	t.Cleanup(func() { n.removeDir(t) })

	n.startContainerd(t)
	n.importImages(t)
	n.startKubelet(t, env, kubelet)
	return n
}

// startContainerd runs containerd with its own root, state and socket, and
// the CRI plugin's sandbox image set to PauseImage.
func (n *Node) startContainerd(t testing.TB) {
	t.Helper()
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[8]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
`, filepath.Join(n.Dir, "containerd"), filepath.Join(n.Dir, "run"), n.Containerd,
		filepath.Join(n.Dir, "containerd-ttrpc.sock"), PauseImage,
		filepath.Join(n.Dir, "cni", "bin"), filepath.Join(n.Dir, "cni", "conf"), n.runc(t))
	path := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	n.daemon(t, "containerd", exec.Command("containerd", "--config", path))
	waitFor(t, 30*time.Second, "containerd's socket", func() bool {
		c, err := net.Dial("unix", n.Containerd)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// runc is the runtime binary containerd runs: runc itself, or, where this
// process lacks CAP_SYS_RESOURCE (a sandboxed CI machine), a script that
// raises a negative oomScoreAdj of the container's spec to 0 before it
// runs runc, since the kernel refuses to lower the score there and the
// kubelet asks -998 of every sandbox and -997 of a Guaranteed container.
// The score only orders the kernel's choice of a victim on a machine out
// of memory; the tests never run one out of it.
func (n *Node) runc(t testing.TB) string {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	if hasCapSysResource() {
		return runc
	}
	script := filepath.Join(n.Dir, "runc")
	body := `#!/bin/sh
prev=
for a in "$@"; do
  if [ "$prev" = --bundle ] || [ "$prev" = -b ]; then
    sed -i -E 's/"oomScoreAdj":-[0-9]+/"oomScoreAdj":0/' "$a/config.json"
  fi
  prev=$a
done
exec ` + runc + ` "$@"
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubetest: no CAP_SYS_RESOURCE here: containers run with oom_score_adj 0 at least (%s)", script)
	return script
}

// hasCapSysResource reports whether this process may lower an
// oom_score_adj.
func hasCapSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<24) != 0 // CAP_SYS_RESOURCE
		}
	}
	return false
}

// importImages writes the test images as OCI archives and imports them
// into containerd's k8s.io namespace, where the CRI plugin finds them.
func (n *Node) importImages(t testing.TB) {
	t.Helper()
	extra := map[string]string{}
	for dst, pkg := range map[string]string{"/bin/lardon3d-synth": "./cmd/lardon3d-synth", podrunner.WrapperPath: "./cmd/lardon3d-podwrap"} {
		out := filepath.Join(n.Dir, filepath.Base(dst))
		build := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
		build.Dir = RepoRoot(t)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("kubetest: building %s: %v\n%s", pkg, err, b)
		}
		extra[dst] = out
	}
	layer, err := busyboxLayer(extra)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	images := []struct {
		ref string
		cmd []string
	}{
		{BatchImage, []string{"/bin/sh"}},
		// The sandbox's process only waits, and ends at SIGTERM.
		{PauseImage, []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait; done"}},
	}
	for _, im := range images {
		archive := filepath.Join(n.Dir, strings.NewReplacer("/", "_", ":", "_").Replace(im.ref)+".tar")
		if err := writeOCIArchive(archive, im.ref, layer, im.cmd); err != nil {
			t.Fatalf("kubetest: image %s: %v", im.ref, err)
		}
		out, err := exec.Command("ctr", "--address", n.Containerd, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
		if err != nil {
			t.Fatalf("kubetest: importing %s: %v\n%s", im.ref, err, out)
		}
	}
}

// startKubelet runs the kubelet against env with the cgroupfs driver, no
// authentication of its own (anonymous, always allowed: the API server
// reaches it for logs) and waits for its Node.
func (n *Node) startKubelet(t testing.TB, env *Env, bin string) {
	t.Helper()
	port := freePort(t)
	ip := hostIP(t)
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
address: %s
port: %d
readOnlyPort: 0
healthzPort: 0
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
registerNode: true
resolvConf: ""
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
fileCheckFrequency: 5s
serializeImagePulls: false
`, ip, port, n.Containerd)
	path := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	n.daemon(t, "kubelet", exec.Command(bin,
		"--config", path,
		"--kubeconfig", env.Kubeconfig,
		"--root-dir", filepath.Join(n.Dir, "kubelet"),
		"--cert-dir", filepath.Join(n.Dir, "pki"),
		"--hostname-override", n.Name,
		"--node-ip", ip,
		"--v", "1",
	))
	waitFor(t, 2*time.Minute, "the kubelet's Node "+n.Name, func() bool {
		var node corev1.Node
		return env.Client.Get(context.Background(), ctrlclient.ObjectKey{Name: n.Name}, &node) == nil
	})
}

// daemon starts cmd with its output in DIR/NAME.log and stops it (SIGTERM,
// then SIGKILL after 10 s) at cleanup; the log is shown when the test failed.
func (n *Node) daemon(t testing.TB, name string, cmd *exec.Cmd) {
	t.Helper()
	logPath := filepath.Join(n.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("kubetest: starting %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		f.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				if len(b) > 20000 {
					b = b[len(b)-20000:]
				}
				t.Logf("kubetest: the end of %s's log:\n%s", name, b)
			}
		}
	})
}

// removeDir removes what the node left: the containers' shims and mounts
// first (a runc container outlives containerd), then the directory.
func (n *Node) removeDir(t testing.TB) {
	// Every runc container of this containerd is under DIR/run.
	root := filepath.Join(n.Dir, "run", "io.containerd.runtime.v2.task", "k8s.io")
	if ents, err := os.ReadDir(root); err == nil {
		for _, e := range ents {
			_ = exec.Command("runc", "--root", "/run/containerd/runc/k8s.io", "kill", "--all", e.Name(), "KILL").Run()
			_ = exec.Command("runc", "--root", "/run/containerd/runc/k8s.io", "delete", "--force", e.Name()).Run()
		}
	}
	// The shims of this containerd outlive it: each holds a container's
	// state until killed.
	if procs, err := procfs.AllProcs(); err == nil {
		for _, p := range procs {
			args, err := p.CmdLine()
			if err == nil && len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") && slices.Contains(args, n.Containerd) {
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
			}
		}
	}
	// Mounts under the directory (rootfs overlays, volumes), deepest first.
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && strings.HasPrefix(f[4], n.Dir+"/") {
				mounts = append(mounts, f[4])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
	// The kubelet's cgroups (cgroupfs driver: kubepods under every
	// hierarchy), emptied with its containers, deepest first.
	if hier, err := filepath.Glob("/sys/fs/cgroup/*/kubepods"); err == nil {
		for _, top := range append(hier, "/sys/fs/cgroup/kubepods") {
			var dirs []string
			_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				_ = syscall.Rmdir(dirs[i])
			}
		}
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		t.Logf("kubetest: removing %s: %v", n.Dir, err)
	}
}

// hostIP is this machine's first IPv4 address that is not a loopback one
// (the kubelet refuses a loopback node IP).
func hostIP(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	t.Fatal("kubetest: the kubelet needs an IPv4 address that is not a loopback one; this machine has none")
	return ""
}

// freePort is a TCP port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	port, _ := strconv.Atoi(p)
	return port
}

// waitFor polls cond every 100 ms until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("kubetest: no %s after %v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
