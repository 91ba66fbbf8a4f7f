package podrunner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

func batchSpec() runner.Spec {
	uid := int64(1000)
	return runner.Spec{
		Task:         "castle.features",
		Command:      []string{"colmap", "feature_extractor", "--image_list_path", "$(LARDON3D_ITEMS_FILE)"},
		Env:          []runner.EnvVar{{Name: "MODE", Value: "$(LARDON3D_THREADS)x"}},
		Mark:         runner.EnvVar{Name: "LARDON3D_STATE_DIR", Value: "/var/lib/lardon3d"},
		Items:        []string{"/data/a.jpg", "/data/b.jpg"},
		BatchIndex:   3,
		BatchStart:   40,
		ItemsTotal:   100,
		Threads:      4,
		MemoryLimit:  1 << 30,
		ScratchDir:   "/scratch/lease-1",
		ScratchBytes: 2 << 30,
		GPUSlots:     1,
		KillGrace:    2500 * time.Millisecond,
		Pod:          &v1alpha1.TaskPod{Image: "colmap:3.9", RunAsUser: &uid, Volumes: []v1alpha1.PodVolume{{Name: "data", MountPath: "/data", ClaimName: "photos", ReadOnly: true}}},
	}
}

// TestPodForHoldsTheContract: the Pod of a batch states its contract as
// limits equal to requests, its items in the annotation the container
// reads, the batch's variables and none of the agent's, and no token.
func TestPodForHoldsTheContract(t *testing.T) {
	p := &Pods{Node: "ws1"}
	pod, err := p.podFor(context.Background(), batchSpec(), "castle", "features")
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	contract := int64(1 << 30)
	want := map[corev1.ResourceName]int64{
		corev1.ResourceMemory:           int64(float64(contract) * 1.10),
		corev1.ResourceCPU:              4,
		corev1.ResourceEphemeralStorage: 2 << 30,
		GPUResource:                     1,
	}
	for name, v := range want {
		lim, req := c.Resources.Limits[name], c.Resources.Requests[name]
		if lim.Value() != v || req.Value() != v {
			t.Errorf("%s: limit %s request %s, want %d both", name, lim.String(), req.String(), v)
		}
	}
	if got := pod.Annotations[ItemsAnnotation]; got != "/data/a.jpg\n/data/b.jpg\n" {
		t.Errorf("items annotation %q", got)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	for name, v := range map[string]string{
		"LARDON3D_ITEMS_FILE": v1alpha1.PodItemsDir + "/items", "LARDON3D_THREADS": "4", "OMP_NUM_THREADS": "4",
		"LARDON3D_BATCH_INDEX": "3", "LARDON3D_BATCH_START": "40", "LARDON3D_BATCH_SIZE": "2", "LARDON3D_SCRATCH_DIR": ScratchMount,
		"MODE": "4x", "LARDON3D_TASK": "castle.features",
	} {
		if env[name] != v {
			t.Errorf("%s=%q, want %q", name, env[name], v)
		}
	}
	for _, name := range []string{"LARDON3D_STATE_DIR", "PATH", "HOME"} {
		if _, ok := env[name]; ok {
			t.Errorf("the agent's %s reaches the container", name)
		}
	}
	if got := strings.Join(c.Command, " "); got != "colmap feature_extractor --image_list_path "+v1alpha1.PodItemsDir+"/items" {
		t.Errorf("command %q", got)
	}
	if a := pod.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("the Pod mounts an API token without a service account named")
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || *sc.RunAsUser != 1000 {
		t.Errorf("security context %+v", sc)
	}
	if pod.Spec.NodeName != "ws1" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever || *pod.Spec.TerminationGracePeriodSeconds != 3 {
		t.Errorf("node %q restart %q grace %d", pod.Spec.NodeName, pod.Spec.RestartPolicy, *pod.Spec.TerminationGracePeriodSeconds)
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = true
	}
	for _, m := range []string{v1alpha1.PodItemsDir, ScratchMount, "/data"} {
		if !mounts[m] {
			t.Errorf("nothing mounted at %s: %v", m, c.VolumeMounts)
		}
	}
	if pod.GenerateName != "features-b3-" {
		t.Errorf("generateName %q", pod.GenerateName)
	}
}

func TestPodForRefusesWhatNoPodHolds(t *testing.T) {
	p := &Pods{Node: "ws1", SplitName: func(string) (string, string, bool) { return "castle", "features", true }}
	s := batchSpec()
	s.Items = []string{strings.Repeat("x", MaxItemsBytes)}
	if _, err := p.podFor(context.Background(), s, "castle", "features"); !errors.Is(err, runner.ErrInvalidSpec) {
		t.Errorf("items over an annotation: %v, want ErrInvalidSpec", err)
	}
	s = batchSpec()
	s.Pod = nil
	if _, err := p.Start(context.Background(), s); !errors.Is(err, runner.ErrInvalidSpec) || !strings.Contains(err.Error(), "spec.pod.image") || !strings.Contains(err.Error(), "--default-image") {
		t.Errorf("no image: %v, want ErrInvalidSpec naming spec.pod.image and --default-image", err)
	}
}

func TestPodPrefixFitsALabel(t *testing.T) {
	long := strings.Repeat("a", 40) + "." + strings.Repeat("b", 100)
	got := podPrefix(long, 12345)
	if len(got)+5 > 63 || !strings.HasSuffix(got, "-b12345-") || strings.Contains(got, ".-") {
		t.Errorf("prefix %q (%d bytes)", got, len(got))
	}
}

// TestPodForWrapsTheCommand: with a wrapper image, an init container
// installs the wrapper with the batch's own resources (the Pod's request
// stays the contract, Guaranteed), and the command runs under it.
func TestPodForWrapsTheCommand(t *testing.T) {
	p := &Pods{Node: "ws1", WrapperImage: "lardon3d-controller:1"}
	pod, err := p.podFor(context.Background(), batchSpec(), "castle", "features")
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want 1", len(pod.Spec.InitContainers))
	}
	ic, c := pod.Spec.InitContainers[0], pod.Spec.Containers[0]
	if ic.Image != "lardon3d-controller:1" || strings.Join(ic.Command, " ") != WrapperPath+" --install "+wrapperDir+"/lardon3d-podwrap" {
		t.Errorf("init container %s %v", ic.Image, ic.Command)
	}
	for name, q := range c.Resources.Limits {
		if l, r := ic.Resources.Limits[name], ic.Resources.Requests[name]; l.Cmp(q) != 0 || r.Cmp(q) != 0 {
			t.Errorf("init container %s %s/%s, want the batch's %s", name, l.String(), r.String(), q.String())
		}
	}
	if got := strings.Join(c.Command[:3], " "); got != wrapperDir+"/lardon3d-podwrap -- colmap" {
		t.Errorf("command %v", c.Command)
	}
	if *ic.SecurityContext.RunAsUser != 1000 || *ic.SecurityContext.AllowPrivilegeEscalation {
		t.Errorf("init container security %+v", ic.SecurityContext)
	}
}

func TestSplitPeak(t *testing.T) {
	for _, tc := range []struct {
		msg, rest string
		peak      int64
	}{
		{"", "", 0},
		{"\n" + v1alpha1.PodPeakMemoryPrefix + "1234\n", "", 1234},
		{"disk full\n\n" + v1alpha1.PodPeakMemoryPrefix + "99\n", "disk full", 99},
		{"no peak here", "no peak here", 0},
		{v1alpha1.PodPeakMemoryPrefix + "x", "", 0},
	} {
		rest, peak := splitPeak(tc.msg)
		if rest != tc.rest || peak != tc.peak {
			t.Errorf("splitPeak(%q) = %q, %d; want %q, %d", tc.msg, rest, peak, tc.rest, tc.peak)
		}
	}
}
