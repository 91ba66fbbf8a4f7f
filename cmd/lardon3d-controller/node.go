//go:build lardon3d_node

// The node agent links client-go and controller-runtime, whose size and
// start-up cost (the binary's pages, every API group's registration) the
// spool-mode verbs should not pay: it is built into a companion binary,
// lardon3d-controller-node (`-tags lardon3d_node`), which the default
// binary's `node` verb runs (node_stub.go).

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/lardon3d/lardon3d-controller/pkg/agent"
	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
	"github.com/lardon3d/lardon3d-controller/pkg/metrics"
	"github.com/lardon3d/lardon3d-controller/pkg/podrunner"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// newNodeCommand is the node verb itself.
func newNodeCommand(g *globals) *cobra.Command {
	var (
		kubeconfig     string
		nodeName       string
		namespace      string
		leaseNamespace string
		leaseDuration  time.Duration
		renewPeriod    time.Duration
		renewDeadline  time.Duration
		takeoverHalt   float64
		drainTimeout   time.Duration
		tolerateTaints []string
		stateDir       string
		dataDir        string
		killGrace      time.Duration
		cgroupMode     string
		cgroupParent   string
		provisional    string
		metricsAddr    string
		batchPolicy    string
		executor       string
		defaultImage   string
		wrapperImage   string
	)
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run a node agent: the same controller, taking its Tasks from a Kubernetes API server",
		Long: `Run a node agent on a Kubernetes cluster: it watches the Tasks
(tasks.lardon3d.io), claims those this node's governor admits with one
conditional update of their status, runs them with the same queue, governor
and runner as the spool mode, and commits their progress in their status.
It heartbeats a Lease (in --lease-namespace) with its capacity; the tasks of
a node whose Lease expired are taken over by the others from their committed
progress. Without --kubeconfig it uses the in-cluster configuration (a pod's
ServiceAccount, see deploy/).`,
		Args: cobra.NoArgs,
	}
	loadBudgets := budgetFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster (default: the in-cluster configuration)")
	f.StringVar(&nodeName, "node-name", "", "this node's name in claims and its Lease (default: $NODE_NAME, else the host name)")
	f.StringVar(&namespace, "namespace", "", "only the Tasks of this namespace (default: every namespace)")
	f.StringVar(&leaseNamespace, "lease-namespace", "lardon3d", "namespace of the nodes' Leases")
	f.DurationVar(&leaseDuration, "lease-duration", 15*time.Second, "how long a renewal of this node's Lease keeps it alive, counted by each other node from when it saw the renewal; once expired, other nodes take its tasks over")
	f.DurationVar(&renewPeriod, "lease-renew-period", 0, "time between two renewals of the Lease (default: 2/15 of --lease-duration, 2s of 15s)")
	f.DurationVar(&renewDeadline, "lease-renew-deadline", 0, "with no successful renewal for this long, this node stops (pauses) its batches until one succeeds, before others may take its tasks over (default: 2/3 of --lease-duration; between the renew period and the lease duration)")
	f.Float64Var(&takeoverHalt, "takeover-halt-fraction", 0.55, "no takeover while more than this fraction of the nodes' Leases are expired at once (the API server or the network is then the likely fault); 1 never halts")
	f.DurationVar(&drainTimeout, "drain-timeout", 20*time.Second, "on SIGTERM or SIGINT, how long the batches in flight may run on to their end before they are stopped; each task is let go (any node may claim it at once) at its batch boundary, or once stopped (a second signal stops them at once)")
	f.StringSliceVar(&tolerateTaints, "tolerate-taint", nil, "key of a NoSchedule or NoExecute taint of this node's Node under which it still claims (repeatable; e.g. nvidia.com/gpu); a cordon or any other such taint drains it")
	f.StringVar(&stateDir, "state-dir", "", "where this node's logs, items files and history go (required)")
	f.StringVar(&dataDir, "data-dir", ".", "directory relative spec.items paths are resolved against (the data shared with the other nodes)")
	f.DurationVar(&killGrace, "kill-grace", 10*time.Second, "SIGTERM to SIGKILL delay when a batch is cancelled (a fenced task's batches are cancelled at once)")
	f.StringVar(&executor, "executor", executorPod, "how a batch runs: pod (a Pod bound to this node, its limits the contract, its image spec.pod.image) or process (a process of the agent's own machine, as the spool mode runs it)")
	f.StringVar(&defaultImage, "default-image", "", "with --executor pod, the image of a batch whose Task names no spec.pod.image (e.g. one holding the step tools the bundled examples name)")
	f.StringVar(&wrapperImage, "wrapper-image", "", "with --executor pod, an image holding lardon3d-podwrap at "+podrunner.WrapperPath+" (the agent's own): each batch Pod copies it in and runs the command under it, which reports the container's peak memory, so batches feed the learned estimates; none: the peak is unknown")
	f.StringVar(&cgroupMode, "cgroups", "auto", "one cgroup per batch: auto, required or off (as for run)")
	f.StringVar(&cgroupParent, "cgroup-parent", "", "cgroup path under which the batches' cgroups are created (default: the agent's own cgroup)")
	f.StringVar(&batchPolicy, "batch-policy", reconcile.BatchEfficient, "which batch among those that fit: efficient or largest (as for run)")
	f.StringVar(&provisional, "provisional-memory", "25%", "what the first batch of a task with no estimate reserves (as for run)")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve /metrics, /healthz (the process answers) and /readyz (ready once its Tasks are listed) on this address, e.g. :9464 (the DaemonSet's probes)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := newLogger(g, cmd.ErrOrStderr())
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		usage := func(err error) error { return &exitError{code: 2, err: err} }
		provFrac, provBytes, err := parseProvisional(provisional)
		if err != nil {
			return usage(err)
		}
		if batchPolicy != reconcile.BatchLargest && batchPolicy != reconcile.BatchEfficient {
			return usage(fmt.Errorf("--batch-policy %q: want largest or efficient", batchPolicy))
		}
		if executor != executorPod && executor != executorProcess {
			return usage(fmt.Errorf("--executor %q: want pod or process", executor))
		}
		if stateDir == "" {
			return usage(errors.New("--state-dir is required: this node's logs, items files and history go there"))
		}
		if leaseDuration < time.Second {
			return usage(fmt.Errorf("--lease-duration %v: at least 1s", leaseDuration))
		}
		if renewPeriod < 0 || renewDeadline < 0 {
			return usage(errors.New("--lease-renew-period and --lease-renew-deadline may not be negative"))
		}
		if takeoverHalt <= 0 || takeoverHalt > 1 {
			return usage(fmt.Errorf("--takeover-halt-fraction %v: want a fraction above 0, at most 1", takeoverHalt))
		}
		if nodeName == "" {
			nodeName = os.Getenv("NODE_NAME")
		}
		if nodeName == "" {
			if nodeName, err = os.Hostname(); err != nil {
				return usage(fmt.Errorf("--node-name: %w", err))
			}
		}
		bc, err := loadBudgets()
		if err != nil {
			return usage(err)
		}
		var cfg *rest.Config
		if kubeconfig != "" {
			cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		} else {
			cfg, err = rest.InClusterConfig()
		}
		if err != nil {
			return usage(fmt.Errorf("kubernetes configuration: %w", err))
		}
		ctrllog.SetLogger(logr.Discard())
		scheme := kruntime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			return usage(err)
		}
		if err := kubeapi.AddToScheme(scheme); err != nil {
			return usage(err)
		}
		data, err := filepath.Abs(dataDir)
		if err != nil {
			return usage(err)
		}
		// One agent per state directory.
		lock, err := spool.Lock(stateDir, stateDir)
		if err != nil {
			return usage(err)
		}
		defer lock.Unlock()
		var cgroups *cgroup.Tree
		if executor == executorProcess {
			// A Pod's cgroup is the kubelet's.
			if cgroups, err = openCgroups(cgroupMode, cgroupParent, stateDir, log); err != nil {
				return usage(err)
			}
			defer removeCgroups(cgroups, log) // once Run returned: every batch's group is gone
		}
		leases := scratch.New(data, bc.ScratchDirs, log)
		gov, prober, err := newMachine(bc, leases.Prefix())
		if err != nil {
			return usage(err)
		}
		// A batch runs as a Pod: its GPU memory is the kubelet's affair.
		snapshot := reconcile.SnapshotFunc(prober.Snapshot)
		defer gov.Close()
		for _, w := range bc.warnings() {
			log.Warn().Msg(w)
		}
		if w := bc.capWarning(gov); w != "" {
			log.Warn().Msg(w)
		}
		m := metrics.New(gov)
		if metricsAddr != "" {
			stop, err := serveOn("--metrics-addr", metricsAddr, "metrics", m.Handler(false), log)
			if err != nil {
				return usage(err)
			}
			defer stop()
		}
		src, err := agent.New(agent.Config{
			Rest: cfg, Scheme: scheme, Node: nodeName, Namespace: namespace,
			LeaseNamespace: leaseNamespace, LeaseDuration: leaseDuration,
			RenewPeriod: renewPeriod, RenewDeadline: renewDeadline, TakeoverHalt: takeoverHalt,
			TolerateTaints: tolerateTaints,
			Governor:       gov, DataDir: data, Logger: log,
		})
		if err != nil {
			return usage(err)
		}
		var exec runner.Executor
		if executor == executorPod {
			pods, err := newPodExecutor(cfg, scheme, nodeName)
			if err != nil {
				return usage(err)
			}
			pods.DefaultImage, pods.WrapperImage = defaultImage, wrapperImage
			// What a previous agent of this node left runs again from
			// its committed progress: its Pods go first.
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Minute)
			n, err := pods.Cleanup(cctx)
			ccancel()
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if n > 0 {
				log.Warn().Int("pods", n).Msg("deleted the batch Pods a previous agent of this node left")
			}
			exec = pods
			// The governor counts what the kubelet counts: the node's
			// allocatable, less what the Pods it did not make request.
			watch := &podrunner.NodeWatch{Client: pods.Client, Node: nodeName}
			rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
			first, err := watch.Refresh(rctx)
			rcancel()
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			log.Info().Str("allocatable", governor.FormatBytes(first.AllocatableMemory)).Str("requested by other pods", governor.FormatBytes(first.ForeignMemoryRequests)).Msg("the kubelet's view of this node")
			wctx, wcancel := context.WithCancel(context.Background())
			defer wcancel()
			go watch.Run(wctx, 2*time.Second)
			probeSnapshot := snapshot
			snapshot = func() (governor.Snapshot, error) {
				s, err := probeSnapshot()
				return podrunner.KubeletBound(s, watch.View(), memoryTolerance), err
			}
			s, err := snapshot()
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			gov.Update(s)
		}
		qcfg := queue.Config{}
		if bc.MaxParallel != nil {
			qcfg.MaxParallel = *bc.MaxParallel
		}
		ctrl := reconcile.New(reconcile.Config{
			SpoolDir:  data,
			StateDir:  stateDir,
			KillGrace: killGrace,
			Queue:     qcfg,

			ProvisionalFraction: provFrac,
			ProvisionalBytes:    provBytes,
			BatchPolicy:         batchPolicy,
			MemoryTolerance:     memoryTolerance,
			// Progress is committed in the Task before the next batch
			// starts: a lost node loses only its batches in flight.
			CommitBeforeNextBatch: true,
		}, reconcile.Deps{Spool: src, Governor: gov, Snapshot: snapshot, Scratch: leases, Cgroups: cgroups, Executor: exec, Metrics: m, Logger: log})
		src.UseDrainer(ctrl)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sigs := make(chan os.Signal, 2)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		go drainOnSignal(ctx, cancel, sigs, src, drainTimeout, log)
		log.Info().Str("node", nodeName).Str("host", cfg.Host).Msg("node agent starting")
		_, runErr := ctrl.Run(ctx)
		// What is still held (a batch stopped by the drain's end, a task
		// paused mid-batch) is let go now: its last status is written.
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		src.ReleaseAll(rctx)
		rcancel()
		if runErr != nil && ctx.Err() == nil {
			return &exitError{code: 2, err: runErr}
		}
		return nil
	}
	return cmd
}

// memoryTolerance is how far a batch may go past its memory contract: a
// Pod's memory limit and request are the contract times 1+memoryTolerance.
const memoryTolerance = 0.10

// The node agent's executors (--executor).
const (
	executorPod     = "pod"
	executorProcess = "process"
)

// newPodExecutor runs each batch as a Pod bound to node, owned by its Task.
func newPodExecutor(cfg *rest.Config, scheme *kruntime.Scheme, node string) (*podrunner.Pods, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &podrunner.Pods{
		Client:    cs,
		Node:      node,
		SplitName: agent.SplitCoreName,
		Owner: func(ctx context.Context, namespace, name string) (types.UID, error) {
			var t kubeapi.Task
			if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: namespace, Name: name}, &t); err != nil {
				return "", err
			}
			return t.UID, nil
		},
	}, nil
}

// drainOnSignal, on the first signal, drains the agent: no new claim, no
// new batch, each task let go at its batch boundary; once none is held,
// the drain timeout passed or a second signal came, it cancels the run
// (what still runs is stopped).
func drainOnSignal(ctx context.Context, cancel context.CancelFunc, sigs <-chan os.Signal, src *agent.Source, timeout time.Duration, log zerolog.Logger) {
	select {
	case <-ctx.Done():
		return
	case sig := <-sigs:
		log.Info().Str("signal", sig.String()).Int("held", src.Held()).Dur("drainTimeout", timeout).Msg("stopping: no new claim; each task is let go at its batch boundary")
	}
	defer cancel()
	src.Leave()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for src.Held() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			log.Warn().Int("held", src.Held()).Msg("drain timeout: the batches still running are stopped; their tasks are let go from their committed progress")
			return
		case sig := <-sigs:
			log.Warn().Str("signal", sig.String()).Int("held", src.Held()).Msg("second signal: the batches still running are stopped")
			return
		case <-tick.C:
		}
	}
	log.Info().Msg("drained: every task let go")
}
