// Package podrunner runs a batch as a Pod: the node agent's
// runner.Executor (Pods), so that on Kubernetes the kubelet, not the agent,
// starts, limits and stops a Task's command, under the Task's image and
// identity, and the scheduler sees what the batch holds.
//
// What it owns:
//   - the Pod of each batch: bound to the agent's node (spec.nodeName, no
//     scheduler), in the Task's namespace, owned by the Task (an owner
//     reference: the cluster's garbage collector deletes it with the Task
//     if the agent does not), named TASK-bINDEX-xxxxx (generateName),
//     labelled ManagedByLabel=ManagedBy and NodeLabel=hash of the node;
//   - its one container "batch": spec.pod's image, the Task's command and
//     env expanded as for a process (runner.ContainerEnv, over an empty
//     environment: nothing of the agent's reaches it), limits equal to
//     requests equal to the contract (Guaranteed QoS when it states
//     memory): memory the contract plus its tolerance
//     (runner.Spec.MemoryCeiling, what a process's cgroup gets), cpu the
//     threads granted, ephemeral-storage the scratch lease,
//     nvidia.com/gpu the GPU slots;
//   - the items: one per line in the Pod's annotation ItemsAnnotation,
//     which a downward-API volume shows the container as
//     v1alpha1.PodItemsDir/items (LARDON3D_ITEMS_FILE); at most
//     MaxItemsBytes, else Start fails (ErrInvalidSpec);
//   - the scratch lease: an emptyDir at ScratchMount (LARDON3D_SCRATCH_DIR)
//     whose size limit is the lease;
//   - what the Pod may do: no API token unless spec.pod names a service
//     account, no service links, no privilege escalation, every capability
//     dropped, the runtime's default seccomp profile; the namespace's Pod
//     Security level admits or refuses the rest (volumes, host network);
//   - the outcome: the container's exit code; OOMKilled (the kubelet's
//     cgroup killed it at its limit) is ReasonMemoryExceeded with the peak
//     taken as the limit, so the queue retries it under a measured need as
//     for a process; a Pod the kubelet refused or whose image cannot be
//     had ends the batch as failed, saying why. With Pods.WrapperImage,
//     an init container copies lardon3d-podwrap into the Pod and the
//     command runs under it: the container's peak (its own cgroup's,
//     read from inside) comes back in the termination message
//     (v1alpha1.PodPeakMemoryPrefix). Without it the peak is unknown
//     (the agent has no access to the node's cgroups) and the batch
//     feeds no learned estimate (history.Record.Usable);
//   - the log: once the batch ended, the container's output is appended
//     to the task's log (runner.Spec.LogPath) between a header and an end
//     line like a process batch's, then the Pod is deleted; while it runs,
//     `kubectl logs` reads it from the kubelet;
//   - pause and cancel: a Pod cannot be frozen, so Pause deletes the Pod
//     (SIGTERM, then SIGKILL after KillGrace, as the kubelet does) and
//     waits until it is gone; Resume creates a new Pod that runs the same
//     items from the start (the batch's items are committed only when it
//     ends). Cancel deletes it too. The timeout counts running time only;
//   - what a crashed agent left: Cleanup deletes every Pod of this node
//     carrying ManagedByLabel, before any batch starts;
//   - the kubelet's view of the node (nodeview.go): NodeWatch reads the
//     Node's allocatable and the memory requests of the Pods bound to it
//     that no agent made, every 2 s; KubeletBound bounds the machine's
//     snapshot by it, in contract units (a Pod requests its contract
//     times 1+tolerance), so that the governor admits only what the
//     kubelet admits.
//
// Files: pods.go makes a batch's Pod (Pods, podFor) and cleans up;
// batch.go supervises it (podBatch: follow, pause, cancel, outcome, log);
// nodeview.go is the kubelet's view of the node.
//
// It never decides admission, retries or resizes a batch, writes a Task,
// or reads the node's files: what it knows of a batch comes from the API
// server.
//
// Concurrency: one supervising goroutine per batch owns its Pod; Pause,
// Resume and Cancel hand it requests on a channel and Pause and Resume
// wait for its answer; the end of Start's context cancels the batch.
// podBatch.mu guards only the result; NodeWatch.mu only the last view.
// Neither is held across a call to the API server.
package podrunner
