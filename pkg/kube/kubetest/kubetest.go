// Package kubetest starts a real Kubernetes control plane for tests: etcd and
// kube-apiserver, built from Go modules by hack/kube-test-binaries.sh, run by
// controller-runtime's envtest, with the CRD tasks.lardon3d.io installed from
// deploy/crd/, the very file users apply; and, with StartNode, a real node:
// the kubelet (built the same way) over containerd and runc.
//
// The binaries are found through LARDON3D_KUBE_ASSETS or KUBEBUILDER_ASSETS
// (a directory holding kube-apiserver, etcd and kubelet, as `make test`
// exports it);
// when neither is set, Start runs hack/kube-test-binaries.sh itself, which
// builds them on first use (minutes, once) and prints the cached directory
// afterwards.
//
// It never downloads a binary and never talks to a cluster other than the one
// it starts; each Start is a fresh control plane, stopped by t.Cleanup.
package kubetest

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/procfs"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client with Task and the built-in types
	// registered.
	Client ctrlclient.Client
	// Scheme holds Task and the built-in types.
	Scheme *kruntime.Scheme
	// Kubeconfig is the path of a kubeconfig file for Config, for processes.
	Kubeconfig string
}

// RepoRoot is the repository's root directory, found from this file.
func RepoRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("kubetest: cannot locate the repository")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Assets is the directory holding kube-apiserver, etcd and kubelet.
func Assets(t testing.TB) string {
	for _, v := range []string{"LARDON3D_KUBE_ASSETS", "KUBEBUILDER_ASSETS"} {
		if d := os.Getenv(v); d != "" {
			return d
		}
	}
	script := filepath.Join(RepoRoot(t), "hack", "kube-test-binaries.sh")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubetest: %s: %v\n%s", script, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1]
}

var quietLogs sync.Once

// Start starts etcd and kube-apiserver, installs the CRD and returns the
// environment; t.Cleanup stops it.
func Start(t testing.TB) *Env {
	t.Helper()
	// controller-runtime logs nowhere until told, and says so with a stack
	// trace after 30 s; the tests report through t, not through its log.
	quietLogs.Do(func() { ctrllog.SetLogger(logr.Discard()) })
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := kubeapi.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory:    Assets(t),
		CRDDirectoryPaths:        []string{filepath.Join(RepoRoot(t), "deploy", "crd")},
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	// A test node (StartNode) is reached at its address, not by a host
	// name no resolver knows (kubectl logs, the agent's log copy).
	te.ControlPlane.GetAPIServer().Configure().Set("kubelet-preferred-address-types", "InternalIP,Hostname")
	start := time.Now()
	cfg, err := te.Start()
	if err != nil {
		t.Fatalf("kubetest: starting etcd and kube-apiserver from %s: %v", te.BinaryAssetsDirectory, err)
	}
	t.Cleanup(func() {
		if err := te.Stop(); err != nil {
			t.Errorf("kubetest: stopping the control plane: %v", err)
		}
	})
	t.Logf("kubetest: control plane up in %v", time.Since(start).Round(time.Millisecond))
	c, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, te.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, Kubeconfig: kc}
}

// StopAPIServer stops the API server's process (SIGSTOP), as in an outage:
// its clients' connections stay open and their requests hang. The returned
// function starts it again (SIGCONT); t.Cleanup does if the test did not.
func (e *Env) StopAPIServer(t testing.TB) (resume func()) {
	t.Helper()
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := procfs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil || len(args) == 0 || filepath.Base(args[0]) != "kube-apiserver" {
			continue
		}
		if slices.Contains(args, "--secure-port="+u.Port()) {
			pid = p.PID
		}
	}
	if pid == 0 {
		t.Fatalf("kubetest: no kube-apiserver process serves port %s", u.Port())
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// TaskGVK is the group, version and kind of a Task.
var TaskGVK = schema.GroupVersionKind{Group: kubeapi.GroupVersion.Group, Version: kubeapi.GroupVersion.Version, Kind: "Task"}
