package kubetest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// TestNodeRunsAHostNetworkPod: the test node runs a Pod of the batch image
// to its end, and the Pod's status says how it ended.
func TestNodeRunsAHostNetworkPod(t *testing.T) {
	env := Start(t)
	n := StartNode(t, env, "smoke")
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: n.Name, HostNetwork: true, RestartPolicy: corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "c", Image: BatchImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", "echo hello; exit 3"}}},
		},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := env.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod still %s: %+v", pod.Status.Phase, pod.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cs := pod.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 3 {
		t.Fatalf("want exit 3, got %+v", cs)
	}
}
