package podrunner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
)

// The labels and annotations of a batch's Pod.
const (
	// ManagedByLabel marks every Pod a node agent made.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedBy is its value.
	ManagedBy = "lardon3d-node-agent"
	// NodeLabel holds a hash of the node's name (a label value holds at
	// most 63 characters; a node name up to 253).
	NodeLabel = "lardon3d.io/node-hash"
	// ItemsAnnotation holds the batch's items, one per line.
	ItemsAnnotation = "lardon3d.io/items"
	// BatchAnnotation says which batch of which task the Pod runs.
	BatchAnnotation = "lardon3d.io/batch"
	// ContainerName is the batch's container.
	ContainerName = "batch"
	// ScratchMount is where the scratch lease's emptyDir is mounted.
	ScratchMount = "/var/run/lardon3d-scratch"
	// MaxItemsBytes bounds the items annotation (the API server takes at
	// most 256 KiB of annotations per object).
	MaxItemsBytes = 192 << 10
	// GPUResource is the extended resource of a GPU slot.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
)

// Pods runs each batch as a Pod on Node (runner.Executor).
type Pods struct {
	// Client reaches the API server.
	Client kubernetes.Interface
	// Node is the node every Pod is bound to.
	Node string
	// Owner gives the UID of the Task namespace/name, for the Pod's owner
	// reference; nil, or an error, makes the Pod without one.
	Owner func(ctx context.Context, namespace, name string) (types.UID, error)
	// SplitName turns a task's name (runner.Spec.Task) into its namespace
	// and name.
	SplitName func(task string) (namespace, name string, ok bool)
	// Gone bounds the wait for a deleted Pod to disappear (its processes
	// stopped), beyond its grace period; 0 means 2 minutes.
	Gone time.Duration
	// DefaultImage is the image of a batch whose task names none
	// (spec.pod.image); "" leaves such a batch unable to start.
	DefaultImage string
	// WrapperImage, when set, is an image holding lardon3d-podwrap at
	// WrapperPath: an init container copies it into the Pod, and the
	// batch's command runs under it, which reports the container's peak
	// memory in its termination message. "" runs the command bare, its
	// peak unknown.
	WrapperImage string
}

// WrapperPath is where WrapperImage holds lardon3d-podwrap; wrapperDir
// is where the Pod's containers share the copy.
const (
	WrapperPath = "/usr/local/bin/lardon3d-podwrap"
	wrapperDir  = "/var/run/lardon3d-bin"
)

var _ runner.Executor = (*Pods)(nil)

// NodeHash is NodeLabel's value for node.
func NodeHash(node string) string {
	sum := sha256.Sum256([]byte(node))
	return hex.EncodeToString(sum[:])[:40]
}

// Cleanup deletes every Pod a node agent made on this node (what a
// previous agent left: its batches are run again from their committed
// progress) and waits until they are gone or ctx ends.
func (p *Pods) Cleanup(ctx context.Context) (int, error) {
	sel := labels.Set{ManagedByLabel: ManagedBy, NodeLabel: NodeHash(p.Node)}.AsSelector().String()
	list, err := p.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return 0, fmt.Errorf("listing the Pods a previous agent left on %s: %w", p.Node, err)
	}
	n := 0
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName != p.Node {
			continue
		}
		if err := p.deletePod(ctx, pod.Namespace, pod.Name, nil); err != nil {
			return n, err
		}
		n++
	}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName == p.Node {
			if err := p.waitGone(ctx, pod.Namespace, pod.Name); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Start creates the batch's Pod and supervises it.
func (p *Pods) Start(ctx context.Context, spec runner.Spec) (runner.Execution, error) {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return nil, fmt.Errorf("%w: empty command", runner.ErrInvalidSpec)
	}
	if spec.Pod == nil || spec.Pod.Image == "" {
		if p.DefaultImage == "" {
			return nil, fmt.Errorf("%w: task %q names no spec.pod.image and the agent has no --default-image: on Kubernetes every batch runs as a Pod of an image", runner.ErrInvalidSpec, spec.Task)
		}
		tp := &v1alpha1.TaskPod{}
		if spec.Pod != nil {
			tp = spec.Pod.DeepCopy()
		}
		tp.Image = p.DefaultImage
		spec.Pod = tp
	}
	split := p.SplitName
	if split == nil {
		split = func(task string) (string, string, bool) { return "", "", false }
	}
	ns, name, ok := split(spec.Task)
	if !ok {
		return nil, fmt.Errorf("%w: task %q names no namespace", runner.ErrInvalidSpec, spec.Task)
	}
	pod, err := p.podFor(ctx, spec, ns, name)
	if err != nil {
		return nil, err
	}
	b := &podBatch{
		p: p, spec: spec, ns: ns, template: pod, ctx: ctx,
		ops:     make(chan podOp),
		done:    make(chan struct{}),
		started: time.Now(),
	}
	first, err := b.create(ctx)
	if err != nil {
		return nil, err
	}
	go b.supervise(first)
	return b, nil
}

// podFor is the Pod of spec's batch, without a name.
func (p *Pods) podFor(ctx context.Context, spec runner.Spec, ns, name string) (*corev1.Pod, error) {
	items := strings.Join(spec.ItemStrings(), "\n")
	if spec.BatchSize() > 0 {
		items += "\n"
	}
	if len(items) > MaxItemsBytes {
		return nil, fmt.Errorf("%w: the batch's items take %d bytes, more than a Pod's annotation holds (%d): lower spec.resources.batch.max",
			runner.ErrInvalidSpec, len(items), MaxItemsBytes)
	}
	cs := spec
	if cs.ScratchDir != "" {
		cs.ScratchDir = ScratchMount
	}
	env, argv, err := runner.ContainerEnv(cs, v1alpha1.PodItemsDir+"/items")
	if err != nil {
		return nil, err
	}
	tp := spec.Pod
	c := corev1.Container{
		Name:                     ContainerName,
		Image:                    tp.Image,
		ImagePullPolicy:          corev1.PullPolicy(tp.ImagePullPolicy),
		Command:                  argv,
		WorkingDir:               spec.ContainerWorkingDir,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: new(bool),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			RunAsUser:                tp.RunAsUser,
			RunAsGroup:               tp.RunAsGroup,
			RunAsNonRoot:             tp.RunAsNonRoot,
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "lardon3d-items", MountPath: v1alpha1.PodItemsDir, ReadOnly: true}},
	}
	for _, e := range env {
		c.Env = append(c.Env, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	res := corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(max(spec.Threads, 1)), resource.DecimalSI)}
	if ceiling := spec.MemoryCeiling(); ceiling > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(ceiling, resource.BinarySI)
	}
	if spec.ScratchBytes > 0 {
		res[corev1.ResourceEphemeralStorage] = *resource.NewQuantity(spec.ScratchBytes, resource.BinarySI)
	}
	if spec.GPUSlots > 0 {
		res[GPUResource] = *resource.NewQuantity(int64(spec.GPUSlots), resource.DecimalSI)
	}
	c.Resources = corev1.ResourceRequirements{Limits: res, Requests: res.DeepCopy()}

	volumes := []corev1.Volume{{Name: "lardon3d-items", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{Path: "items", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + ItemsAnnotation + "']"}}},
	}}}}
	if spec.ScratchDir != "" {
		ed := &corev1.EmptyDirVolumeSource{}
		if spec.ScratchBytes > 0 {
			ed.SizeLimit = resource.NewQuantity(spec.ScratchBytes, resource.BinarySI)
		}
		volumes = append(volumes, corev1.Volume{Name: "lardon3d-scratch", VolumeSource: corev1.VolumeSource{EmptyDir: ed}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "lardon3d-scratch", MountPath: ScratchMount})
	}
	for _, v := range tp.Volumes {
		var src corev1.VolumeSource
		switch {
		case v.ClaimName != "":
			src.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.ClaimName, ReadOnly: v.ReadOnly}
		case v.HostPath != "":
			src.HostPath = &corev1.HostPathVolumeSource{Path: v.HostPath}
		default:
			src.EmptyDir = &corev1.EmptyDirVolumeSource{}
		}
		volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: src})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath, ReadOnly: v.ReadOnly})
	}
	var initContainers []corev1.Container
	if p.WrapperImage != "" {
		wrapped := wrapperDir + "/lardon3d-podwrap"
		volumes = append(volumes, corev1.Volume{Name: "lardon3d-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		initContainers = append(initContainers, corev1.Container{
			Name:                     "lardon3d-wrap",
			Image:                    p.WrapperImage,
			ImagePullPolicy:          corev1.PullIfNotPresent,
			Command:                  []string{WrapperPath, "--install", wrapped},
			SecurityContext:          c.SecurityContext.DeepCopy(),
			Resources:                *c.Resources.DeepCopy(), // the Pod's request stays the batch's
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			VolumeMounts:             []corev1.VolumeMount{{Name: "lardon3d-bin", MountPath: wrapperDir}},
		})
		c.Command = append([]string{wrapped, "--"}, c.Command...)
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "lardon3d-bin", MountPath: wrapperDir, ReadOnly: true})
	}
	var tolerations []corev1.Toleration
	for _, t := range tp.Tolerations {
		tolerations = append(tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	grace := int64(math.Ceil(spec.KillGrace.Seconds()))
	if grace < 1 {
		grace = int64(runner.DefaultKillGrace / time.Second)
	}
	automount := tp.ServiceAccountName != ""
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: podPrefix(name, spec.BatchIndex),
			Namespace:    ns,
			Labels:       map[string]string{ManagedByLabel: ManagedBy, NodeLabel: NodeHash(p.Node)},
			Annotations: map[string]string{
				ItemsAnnotation: items,
				BatchAnnotation: fmt.Sprintf("task %s batch %d items %d..%d attempt %d", name, spec.BatchIndex, spec.BatchStart, spec.BatchStart+spec.BatchSize()-1, spec.Attempt),
			},
		},
		Spec: corev1.PodSpec{
			NodeName:                      p.Node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			InitContainers:                initContainers,
			Containers:                    []corev1.Container{c},
			Volumes:                       volumes,
			ServiceAccountName:            tp.ServiceAccountName,
			AutomountServiceAccountToken:  &automount,
			EnableServiceLinks:            new(bool),
			HostNetwork:                   tp.HostNetwork,
			NodeSelector:                  tp.NodeSelector,
			Tolerations:                   tolerations,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
	if p.Owner != nil {
		if uid, err := p.Owner(ctx, ns, name); err == nil && uid != "" {
			pod.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "lardon3d.io/v1alpha1", Kind: "Task", Name: name, UID: uid,
			}}
		}
	}
	return pod, nil
}

// podPrefix is the generateName of a batch's Pods: TASK-bINDEX-, the task's
// name cut so that the server's five characters still fit 63.
func podPrefix(task string, index int64) string {
	suffix := "-b" + strconv.FormatInt(index, 10) + "-"
	if room := 63 - 5 - len(suffix); len(task) > room {
		task = strings.TrimRight(task[:room], "-.")
	}
	return task + suffix
}

// deletePod deletes a Pod, with grace seconds when set; gone already is
// no error.
func (p *Pods) deletePod(ctx context.Context, ns, name string, grace *int64) error {
	err := p.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// waitGone returns once the Pod is gone from the API server (the kubelet
// confirmed its containers stopped), or with ctx's error.
func (p *Pods) waitGone(ctx context.Context, ns, name string) error {
	for {
		_, err := p.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for Pod %s/%s to be gone: %w", ns, name, context.Cause(ctx))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
