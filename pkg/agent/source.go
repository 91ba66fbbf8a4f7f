package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/kube"
	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// The annotations of a node's Lease that publish its capacity.
const (
	// AnnotationMemory is the memory the node's governor can grant at most
	// (its capacity less its margin), as a quantity.
	AnnotationMemory = "lardon3d.io/memory-grantable"
	// AnnotationCPUs is the number of threads it can grant at most.
	AnnotationCPUs = "lardon3d.io/cpus"
)

// The client-side rate limit of an agent's requests, unless its rest.Config
// sets one: claims and commits are a few requests per task.
const (
	DefaultQPS   = 200
	DefaultBurst = 400
)

// ReasonNoNodeFits is the Admitted=False reason of a task that no live
// node can fit.
const ReasonNoNodeFits = "NoNodeFits"

// Config is what a Source needs.
type Config struct {
	// Rest reaches the API server; without a QPS of its own, requests are
	// limited to DefaultQPS (bursts of DefaultBurst).
	Rest *rest.Config
	// Scheme holds Task and Lease.
	Scheme *kruntime.Scheme
	// Client writes (a direct client, no cache); built from Rest when nil.
	Client ctrlclient.Client
	// Node is this node's name (the claim's node, the Lease's holder).
	Node string
	// Namespace limits the Tasks watched ("": every namespace).
	Namespace string
	// LeaseNamespace holds every node's Lease.
	LeaseNamespace string
	// LeaseDuration is how long a heartbeat keeps the node alive (>= 1 s),
	// counted by each other node from when it saw the renewal
	// (kube.Liveness).
	LeaseDuration time.Duration
	// RenewPeriod is the time between two renewals of the Lease (default
	// 2/15 of LeaseDuration: 2 s of 15 s, as client-go's leader election).
	RenewPeriod time.Duration
	// RenewDeadline bounds one renewal; once no renewal succeeded for this
	// long, the node stops its batches itself (self-fencing: they are
	// paused, not killed) until one succeeds, so that they are stopped
	// before another node may take their tasks over (default 2/3 of
	// LeaseDuration; RenewPeriod < RenewDeadline < LeaseDuration).
	RenewDeadline time.Duration
	// TakeoverHalt: no task is taken over from another node while more
	// than this fraction of the nodes' Leases (this node's included, and
	// only those of nodes alive or holding a task) are expired at once:
	// the API server or the network is then the likely fault, not the
	// nodes (Kubernetes' node lifecycle controller stops evicting so).
	// Default 0.55; 1 never halts.
	TakeoverHalt float64
	// TolerateTaints are the keys of the NoSchedule and NoExecute taints
	// of this node's Node under which it still claims (e.g. nvidia.com/gpu
	// on GPU nodes); any other, or a cordon, drains it.
	TolerateTaints []string
	// Governor is this node's governor (asked without reserving).
	Governor *governor.Governor
	// DataDir resolves relative spec.items paths, as the spool directory
	// does in spool mode.
	DataDir string
	// Resync is the longest time between two passes (default 500 ms).
	Resync time.Duration
	// Logger reports claims, takeovers and fences.
	Logger zerolog.Logger
	// Events records Events on the Tasks (claims, takeovers, admissions,
	// memory kills, ends: kubectl describe shows them); built from Rest
	// when nil, sent by Run.
	Events record.EventRecorder
}

// Source is the Kubernetes task source; it implements reconcile.Spool.
type Source struct {
	cfg     Config
	client  ctrlclient.Client
	claimer *kube.Claimer
	beat    *kube.Heartbeat
	live    *kube.Liveness
	log     zerolog.Logger
	// halted says whether the last pass halted takeovers (Run's
	// goroutine only; logged when it changes).
	halted bool
	// drainer is the queue a drain stops (UseDrainer).
	drainer Drainer
	// nodeChecked is when the Node was last read; nodeUnreadable says it
	// could not be (Run's goroutine only).
	nodeChecked    time.Time
	nodeUnreadable bool

	events chan spool.Event
	// recorder records Events on Tasks; broadcaster, when the source
	// built it, sends them to sink while Run runs.
	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
	sink        record.EventSink
	notify      chan struct{} // buffered(1): pending grew
	kick        chan struct{} // buffered(1): a watch event or a write
	// ended remembers, by path, whether each ended task was found
	// reopened at the resourceVersion read (Run's goroutine only): a pass
	// over ten thousand finished Tasks parses none that did not change.
	ended map[string]endedMemo

	mu struct {
		sync.Mutex
		// held is every task this process claimed and still holds, by path.
		held map[string]*held
		// pending are the events not yet handed to the reconciler, oldest
		// first.
		pending []spool.Event
		// renewed is when the last successful renewal of the Lease
		// started; beatFailed says whether the last one failed.
		renewed    time.Time
		beatFailed bool
		// fencedAt is when this node stopped its batches for want of a
		// renewal (zero: it did not, or it resumed).
		fencedAt time.Time
		// leaving: the agent stops (Leave); cordoned says why its Node
		// takes no new work ("": it does). Either drains.
		leaving  bool
		cordoned string
		// nodeLabels are this node's Node's labels at its last read (nil:
		// never read), for the tasks' spec.pod.nodeSelector.
		nodeLabels map[string]string
	}
}

// endedMemo is what reopened answered for one version of an ended task.
type endedMemo struct {
	resourceVersion string
	reopened        bool
}

// held is a task this node holds under one claim.
type held struct {
	obj *kubeapi.Task // the last version written or claimed
	// presented is the last version presented to the reconciler (its
	// spec is the one the reconciler has).
	presented *kubeapi.Task
	// written is the last status written (or claimed), as the reconciler
	// wrote it; gens translates it to and from the server's.
	written *v1alpha1.TaskStatus
	gens    generations
	seq     int64
	gen     int64          // the metadata.generation presented
	phase   v1alpha1.Phase // the last phase written
}

var _ reconcile.Spool = (*Source)(nil)

// New builds a Source; Run starts it.
func New(cfg Config) (*Source, error) {
	if cfg.Resync <= 0 {
		cfg.Resync = 500 * time.Millisecond
	}
	if cfg.Node == "" {
		return nil, errors.New("agent: a node name is needed")
	}
	if cfg.LeaseDuration < time.Second {
		return nil, fmt.Errorf("agent: lease duration %v is under 1 s", cfg.LeaseDuration)
	}
	if cfg.RenewPeriod == 0 {
		cfg.RenewPeriod = cfg.LeaseDuration * 2 / 15
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = cfg.LeaseDuration * 2 / 3
	}
	if cfg.TakeoverHalt == 0 {
		cfg.TakeoverHalt = 0.55
	}
	if err := checkLeaseTimes(cfg); err != nil {
		return nil, err
	}
	if cfg.Rest.QPS == 0 && cfg.Rest.RateLimiter == nil {
		// client-go's default (5 requests/s, bursts of 10) would make every
		// claim and commit after the first few wait 200 ms.
		cfg.Rest = rest.CopyConfig(cfg.Rest)
		cfg.Rest.QPS, cfg.Rest.Burst = DefaultQPS, DefaultBurst
	}
	c := cfg.Client
	if c == nil {
		var err error
		if c, err = ctrlclient.New(cfg.Rest, ctrlclient.Options{Scheme: cfg.Scheme}); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	live := &kube.Liveness{}
	s := &Source{
		cfg:     cfg,
		client:  c,
		live:    live,
		claimer: &kube.Claimer{Client: c, Node: cfg.Node, Liveness: live},
		log:     cfg.Logger.With().Str("node", cfg.Node).Logger(),
		events:  make(chan spool.Event, 64),
		notify:  make(chan struct{}, 1),
		kick:    make(chan struct{}, 1),
	}
	s.beat = &kube.Heartbeat{Client: c, Namespace: cfg.LeaseNamespace, Node: cfg.Node, Duration: cfg.LeaseDuration, Annotations: s.capacity}
	s.mu.held = make(map[string]*held)
	s.ended = make(map[string]endedMemo)
	s.recorder = cfg.Events
	if s.recorder == nil {
		cs, err := kubernetes.NewForConfig(cfg.Rest)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		s.broadcaster = record.NewBroadcaster()
		s.sink = &typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")}
		s.recorder = s.broadcaster.NewRecorder(cfg.Scheme, corev1.EventSource{Component: EventComponent, Host: cfg.Node})
	}
	return s, nil
}

// checkLeaseTimes refuses lease times with which a node could be taken
// over before it stopped its batches, or fence itself between two
// renewals.
func checkLeaseTimes(cfg Config) error {
	switch {
	case cfg.RenewPeriod <= 0 || cfg.RenewDeadline <= cfg.RenewPeriod:
		return fmt.Errorf("agent: the renew deadline (%v) must be longer than the renew period (%v)", cfg.RenewDeadline, cfg.RenewPeriod)
	case cfg.RenewDeadline >= cfg.LeaseDuration:
		return fmt.Errorf("agent: the renew deadline (%v) must be shorter than the lease duration (%v): a node stops its batches before others may take its tasks over", cfg.RenewDeadline, cfg.LeaseDuration)
	case cfg.TakeoverHalt <= 0 || cfg.TakeoverHalt > 1:
		return fmt.Errorf("agent: takeover halt fraction %v: want a fraction in (0, 1]", cfg.TakeoverHalt)
	}
	return nil
}

// EventComponent is the source of the Events an agent records.
const EventComponent = "lardon3d-node-agent"

// record records the Event e on the task obj.
func (s *Source) record(obj *kubeapi.Task, e taskEvent) {
	s.recorder.Event(obj, e.kind, e.reason, e.message)
}

// capacity is what the Lease publishes of this node's governor.
func (s *Source) capacity() map[string]string {
	b := s.cfg.Governor.Budgets()
	return map[string]string{
		AnnotationMemory: resource.NewQuantity(max(b.Memory.Capacity-b.Memory.Margin, 0), resource.BinarySI).String(),
		AnnotationCPUs:   fmt.Sprint(max(b.CPU.Capacity-b.CPU.Margin, 0)),
	}
}

// Events carries the tasks this node claimed; it is closed when Run
// returns.
func (s *Source) Events() <-chan spool.Event { return s.events }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// push queues an event for the reconciler. REQUIRES: s.mu held.
func (s *Source) push(ev spool.Event) {
	s.mu.pending = append(s.mu.pending, ev)
	signal(s.notify)
}

// Run heartbeats, watches Tasks and Leases and claims what this node can
// run, until ctx ends.
func (s *Source) Run(ctx context.Context) error {
	// The events reach the reconciler on a goroutine of their own: a pass
	// blocked on the API server (cut off) must not hold back the fence's.
	dctx, dcancel := context.WithCancel(ctx)
	delivered := make(chan struct{})
	go func() { defer close(delivered); s.deliver(dctx) }()
	defer func() {
		dcancel()
		<-delivered
		close(s.events)
	}()
	if s.broadcaster != nil {
		w := s.broadcaster.StartRecordingToSink(s.sink)
		// Shutdown sends what is queued, then stops.
		defer s.broadcaster.Shutdown()
		defer w.Stop()
	}
	start := time.Now()
	if err := s.beat.Beat(ctx); err != nil {
		return fmt.Errorf("first heartbeat: %w", err)
	}
	s.renewalDone(start, nil)
	opts := cache.Options{
		Scheme: s.cfg.Scheme,
		ByObject: map[ctrlclient.Object]cache.ByObject{
			&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{s.cfg.LeaseNamespace: {}}},
		},
	}
	if s.cfg.Namespace != "" {
		opts.ByObject[&kubeapi.Task{}] = cache.ByObject{Namespaces: map[string]cache.Config{s.cfg.Namespace: {}}}
	}
	informers, err := cache.New(s.cfg.Rest, opts)
	if err != nil {
		return fmt.Errorf("watching tasks: %w", err)
	}
	kick := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { signal(s.kick) },
		UpdateFunc: func(any, any) { signal(s.kick) },
		DeleteFunc: func(any) { signal(s.kick) },
	}
	for _, obj := range []ctrlclient.Object{&kubeapi.Task{}, &coordinationv1.Lease{}} {
		inf, err := informers.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(kick); err != nil {
			return fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	cacheErr := make(chan error, 1)
	go func() { cacheErr <- informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("the watch of tasks and leases never synced")
	}
	go func() { _ = s.beat.Run(ctx, s.cfg.RenewPeriod, s.cfg.RenewDeadline, s.renewalDone) }()
	go s.watchRenewals(ctx)
	s.log.Info().Str("leases", s.cfg.LeaseNamespace).Str("namespace", s.cfg.Namespace).Msg("watching tasks")

	tick := time.NewTicker(s.cfg.Resync)
	defer tick.Stop()
	first := true
	for {
		if err := s.pass(ctx, informers); err != nil && ctx.Err() == nil {
			s.log.Warn().Err(err).Msg("pass failed")
		}
		if first {
			s.mu.Lock()
			s.push(spool.Event{Type: spool.Synced})
			s.mu.Unlock()
			first = false
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-cacheErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watching tasks: %w", err)
		case <-s.kick:
		case <-tick.C:
		}
	}
}

// deliver hands the pending events to the reconciler, oldest first, until
// ctx ends.
func (s *Source) deliver(ctx context.Context) {
	for {
		s.mu.Lock()
		var out chan<- spool.Event
		var ev spool.Event
		if len(s.mu.pending) > 0 {
			out, ev = s.events, s.mu.pending[0]
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case out <- ev:
			s.mu.Lock()
			s.mu.pending = s.mu.pending[1:]
			s.mu.Unlock()
		case <-s.notify:
		}
	}
}

// nodeSelects reports whether this node may run t's batches: t names no
// spec.pod.nodeSelector, or this node's Node (read by checkNode) carries
// every label it names, as the kubelet requires of a Pod bound to it. A
// Node never read selects no task that asks.
func (s *Source) nodeSelects(t *kubeapi.Task) bool {
	if t.Spec.Pod == nil || len(t.Spec.Pod.NodeSelector) == 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.nodeLabels == nil {
		return false
	}
	return labels.SelectorFromSet(t.Spec.Pod.NodeSelector).Matches(labels.Set(s.mu.nodeLabels))
}

// Path is the opaque path of a task in the reconciler: "namespace/name".
func Path(namespace, name string) string { return namespace + "/" + name }

// CoreName is the task's name in the reconciler, logs and batch
// environment (LARDON3D_TASK): "namespace.name".
func CoreName(namespace, name string) string { return namespace + "." + name }

// SplitCoreName is CoreName's inverse: a namespace holds no dot, so the
// first one ends it.
func SplitCoreName(core string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(core, ".")
	return namespace, name, ok && namespace != "" && name != ""
}

// pass looks at every task once: drops what this node lost, claims what
// it can run. Run's goroutine only.
func (s *Source) pass(ctx context.Context, r ctrlclient.Reader) error {
	// The cache's objects themselves, not copies: a pass only reads them
	// (a claim or a report writes a deep copy).
	var tasks kubeapi.TaskList
	if err := r.List(ctx, &tasks, ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	var leases coordinationv1.LeaseList
	if err := r.List(ctx, &leases, ctrlclient.InNamespace(s.cfg.LeaseNamespace), ctrlclient.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	byPath := make(map[string]*kubeapi.Task, len(tasks.Items))
	for i := range tasks.Items {
		t := &tasks.Items[i]
		byPath[Path(t.Namespace, t.Name)] = t
	}
	leaseOf := make(map[string]*coordinationv1.Lease, len(leases.Items))
	for i := range leases.Items {
		l := &leases.Items[i]
		if l.Spec.HolderIdentity != nil {
			leaseOf[*l.Spec.HolderIdentity] = l
		}
	}

	s.mu.Lock()
	fenced := !s.mu.fencedAt.IsZero()
	s.mu.Unlock()
	if !fenced {
		s.checkNode(ctx)
	}

	waiting := 0 // claimed, not yet admitted by the local queue
	s.mu.Lock()
	for path, h := range s.mu.held {
		t, ok := byPath[path]
		if !ok {
			delete(s.mu.held, path)
			s.push(spool.Event{Type: spool.Deleted, Path: path})
			s.log.Info().Str("task", path).Msg("task deleted on the API server")
			continue
		}
		if cl := t.Status.Claim; cl != nil && (cl.Seq > h.seq || (cl.Seq == h.seq && cl.Node != s.cfg.Node)) {
			s.lockedFence(path, h.seq, fmt.Sprintf("the task is held by %s under claim %d", cl.Node, cl.Seq))
			continue
		}
		if !fenced && t.Generation != h.gen && t.Status.Claim != nil && t.Status.Claim.Seq == h.seq {
			// (While fenced, the edit waits for the fence's end, which
			// presents every task as the API server has it.)
			h.gen, h.presented = t.Generation, t
			s.push(s.presentHeld(h, t))
		}
		if (h.phase == "" || h.phase == v1alpha1.PhasePending) && !t.Spec.Paused {
			waiting++
		}
	}
	draining := s.lockedDraining()
	s.mu.Unlock()
	if fenced {
		return nil // no claim before a renewal succeeds
	}
	if draining {
		s.releaseDrained(ctx)
		return nil // no claim while draining
	}
	halt := s.haltTakeovers(tasks.Items, leases.Items)

	order := make([]*kubeapi.Task, 0, len(tasks.Items))
	for i := range tasks.Items {
		order = append(order, &tasks.Items[i])
	}
	if len(s.ended) > len(order) {
		// Tasks were deleted: forget what was remembered of them.
		present := make(map[string]bool, len(order))
		for _, t := range order {
			present[Path(t.Namespace, t.Name)] = true
		}
		for p := range s.ended {
			if !present[p] {
				delete(s.ended, p)
			}
		}
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	for _, t := range order {
		if waiting > 0 {
			break
		}
		path := Path(t.Namespace, t.Name)
		s.mu.Lock()
		_, mine := s.mu.held[path]
		s.mu.Unlock()
		ended := v1alpha1.IsTerminal(t.Status.Phase)
		reopened := ended && s.reopened(t)
		if mine || t.Spec.Paused || ended && !reopened {
			// Held by this process (it takes an edit itself), paused, or
			// ended with the spec it has.
			continue
		}
		if !s.nodeSelects(t) {
			continue // its Pods could not run here
		}
		takeOver := false
		var holder *coordinationv1.Lease
		switch cl := t.Status.Claim; {
		case kube.Claimable(t):
		case cl == nil:
			continue
		case cl.Node == s.cfg.Node:
			// Claimed by this node, but not by this process: its former
			// self, whose batches died with it.
			takeOver = true
		default:
			// Not ended (TakeOverable), or ended and reopened: either
			// way, taken only from a holder that is gone.
			if halt || !kube.HolderGone(t, leaseOf[cl.Node], s.live) {
				continue
			}
			// The cache may be behind the server (a Lease created or
			// renewed while this process was stopped, or while the
			// Lease watch lags the Task watch): another node is taken
			// over only on a fresh read of its Lease.
			live, err := s.liveLease(ctx, cl.Node)
			if err != nil {
				s.log.Warn().Str("task", path).Str("holder", cl.Node).Err(err).Msg("holder's Lease not readable; no takeover")
				continue
			}
			if !kube.HolderGone(t, live, s.live) {
				continue
			}
			holder, takeOver = live, true
		}
		if reason, msg := depsState(t, byPath); reason != "" {
			if t.Status.Claim == nil {
				s.reportUnclaimed(ctx, t, v1alpha1.ConditionDependenciesReady, reason, msg)
			}
			continue
		}
		core, perr := s.core(t, &t.Status.TaskStatus)
		if perr != nil {
			// Invalid: claimed all the same, so that a node rejects it
			// with the spool's reasons.
			if s.claim(ctx, t, takeOver, holder, v1alpha1.Contract{GrantedAt: metav1.Now()}) {
				waiting++
			}
			continue
		}
		items, err := v1alpha1.ResolveItems(core.Spec, s.cfg.DataDir)
		if err != nil {
			s.log.Debug().Str("task", path).Err(err).Msg("items not resolvable on this node")
			continue
		}
		est := reconcile.EstimateFor(&core.Spec, max(items.Len(), 1))
		d := s.cfg.Governor.Decide(est)
		switch d.Verdict {
		case governor.Admit, governor.ReduceBatch:
			if s.claim(ctx, t, takeOver, holder, contractOf(est, d)) {
				waiting++
			}
		case governor.Reject:
			s.reportNoFit(ctx, t, d, leases.Items)
		default:
			s.log.Debug().Str("task", path).Stringer("verdict", d.Verdict).Str("reason", string(d.Reason)).Msg("dry run: not now")
		}
	}
	return nil
}

// reopened reports whether t, which ended, asks to run again: the hash of
// its spec as this node runs it (defaulted, its dependencies resolved
// apart: what the reconciler hashes) is not the one its status ended with
// (a new spec.retryToken, an edit).
// Answered once per resourceVersion of the task. Run's goroutine only.
func (s *Source) reopened(t *kubeapi.Task) bool {
	path := Path(t.Namespace, t.Name)
	if m, ok := s.ended[path]; ok && m.resourceVersion == t.ResourceVersion && t.ResourceVersion != "" {
		return m.reopened
	}
	core, _ := s.core(t, &t.Status.TaskStatus)
	r := core != nil && t.Status.SpecHash != "" && v1alpha1.SpecHash(core.Spec) != t.Status.SpecHash
	s.ended[path] = endedMemo{resourceVersion: t.ResourceVersion, reopened: r}
	return r
}

// liveLease reads node's Lease from the API server, past the cache (nil
// when there is none).
func (s *Source) liveLease(ctx context.Context, node string) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	err := s.client.Get(ctx, ctrlclient.ObjectKey{Namespace: s.cfg.LeaseNamespace, Name: kube.LeaseName(node)}, &l)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &l, nil
}

// claim claims (or takes over) t and presents it to the reconciler; it
// reports whether this node now holds it. Run's goroutine only.
func (s *Source) claim(ctx context.Context, t *kubeapi.Task, takeOver bool, holder *coordinationv1.Lease, contract v1alpha1.Contract) bool {
	obj := t.DeepCopy()
	var out kube.ClaimOutcome
	var err error
	switch {
	case takeOver && v1alpha1.IsTerminal(t.Status.Phase):
		out, err = s.claimer.Reopen(ctx, obj, holder, contract)
	case takeOver:
		out, err = s.claimer.TakeOver(ctx, obj, holder, contract)
	default:
		out, err = s.claimer.Claim(ctx, obj, contract)
	}
	path := Path(t.Namespace, t.Name)
	if err != nil {
		s.log.Warn().Str("task", path).Err(err).Msg("claim failed")
		return false
	}
	if out != kube.Claimed {
		s.log.Debug().Str("task", path).Str("outcome", out.String()).Msg("not claimed")
		return false
	}
	seq := obj.Status.Claim.Seq
	msg := "claimed"
	if takeOver {
		msg = "taken over"
		if t.Status.Claim != nil {
			msg = fmt.Sprintf("taken over from %s (claim %d)", t.Status.Claim.Node, t.Status.Claim.Seq)
		}
	}
	s.log.Info().Str("task", path).Int64("seq", seq).Int64("itemsDone", t.Status.Progress.ItemsDone).Msg(msg)
	switch {
	case takeOver && v1alpha1.IsTerminal(t.Status.Phase):
		s.record(obj, taskEvent{corev1.EventTypeNormal, EventReopened, fmt.Sprintf("claimed again by node %s (claim %d): its spec changed after it ended %s", s.cfg.Node, seq, t.Status.Phase)})
	case takeOver:
		s.record(obj, taskEvent{corev1.EventTypeWarning, EventTakenOver, fmt.Sprintf("%s by node %s (claim %d), resuming from %d items committed", msg, s.cfg.Node, seq, t.Status.Progress.ItemsDone)})
	default:
		s.record(obj, taskEvent{corev1.EventTypeNormal, EventClaimed, fmt.Sprintf("claimed by node %s (claim %d)", s.cfg.Node, seq)})
	}
	// The reconciler is handed the status as it was before the claim: it
	// resumes from the committed progress and writes its own phases.
	h := &held{obj: obj, presented: t, seq: seq, gen: t.Generation, gens: newGenerations()}
	h.gens.seed(&t.Status)
	before := h.gens.toCore(&t.Status)
	before.Reservation, before.ProcessGroup = nil, nil
	h.written = h.gens.toCore(&obj.Status)
	s.mu.Lock()
	s.mu.held[path] = h
	ev := s.event(spool.Added, t, before)
	h.gens.presented(ev, t.Generation)
	if !s.mu.fencedAt.IsZero() && ev.Task != nil {
		// Claimed while the fence began: it waits for the fence's end.
		ev.Task.Spec.Paused = true
	}
	s.push(ev)
	s.mu.Unlock()
	return true
}

// presentHeld is the Modified event presenting t, held as h, to the
// reconciler with the status it last wrote. REQUIRES: s.mu.
func (s *Source) presentHeld(h *held, t *kubeapi.Task) spool.Event {
	ev := s.event(spool.Modified, t, h.written)
	h.gens.presented(ev, t.Generation)
	return ev
}

// event is the spool event presenting t with status st.
func (s *Source) event(typ spool.EventType, t *kubeapi.Task, st *v1alpha1.TaskStatus) spool.Event {
	core, err := s.core(t, st)
	return spool.Event{Type: typ, Path: Path(t.Namespace, t.Name), Name: core.Metadata.Name, Task: core, Err: err}
}

// core is t as the spool would have parsed it, with status st and no
// dependsOn (resolved across the cluster before the claim).
func (s *Source) core(t *kubeapi.Task, st *v1alpha1.TaskStatus) (*v1alpha1.Task, error) {
	ct := t.Core()
	ct.Metadata.Name = CoreName(t.Namespace, t.Name)
	ct.Metadata.Generation = 0
	ct.Spec.DependsOn = nil
	ct.Status = *st.DeepCopy()
	data, err := json.Marshal(ct)
	if err != nil {
		return &ct, err
	}
	parsed, err := v1alpha1.ParseManifest(ct.Metadata.Name+".json", data)
	if parsed == nil {
		return &ct, err
	}
	return parsed, err
}

// depsState says why t may not run yet for its dependencies ("" when
// every task it names in dependsOn, in its namespace, is Done), with the
// spool mode's reasons.
func depsState(t *kubeapi.Task, byPath map[string]*kubeapi.Task) (reason, msg string) {
	var waiting, failed, missing []string
	for _, dep := range t.Spec.DependsOn {
		d := byPath[Path(t.Namespace, dep)]
		switch {
		case d == nil:
			missing = append(missing, dep)
		case d.Status.Phase == v1alpha1.PhaseFailed || d.Status.Phase == v1alpha1.PhaseRejected:
			failed = append(failed, dep+" ("+string(d.Status.Phase)+")")
		case d.Status.Phase != v1alpha1.PhaseDone:
			waiting = append(waiting, dep)
		}
	}
	switch {
	case len(failed) > 0:
		return v1alpha1.ReasonDependencyFailed, "a dependency will not complete: " + strings.Join(failed, ", ")
	case len(missing) > 0:
		return v1alpha1.ReasonDependencyMissing, "no task of that name in namespace " + t.Namespace + ": " + strings.Join(missing, ", ")
	case len(waiting) > 0:
		return v1alpha1.ReasonWaitingForDependencies, "waiting for " + strings.Join(waiting, ", ") + " to be Done"
	}
	return "", ""
}

// contractOf is the contract a dry run would grant.
func contractOf(e governor.Estimate, d governor.Decision) v1alpha1.Contract {
	mem := e.FixedMemory + e.PerItemMemory*d.Batch + e.PerThreadMemory*int64(d.Threads)
	return v1alpha1.Contract{
		Batch:          d.Batch,
		BatchRequested: d.BatchRequested,
		Threads:        int32(d.Threads),
		Memory:         *resource.NewQuantity(mem, resource.BinarySI),
		IOSlots:        int32(e.IOSlots),
		GrantedAt:      metav1.Now(),
	}
}

// WriteStatus commits a task's status under the claim it was presented
// with. A task held under another claim now is dropped (ErrFenced): the
// reconciler is told it is gone, and kills its batches.
func (s *Source) WriteStatus(path string, status *v1alpha1.TaskStatus) error {
	s.mu.Lock()
	h := s.mu.held[path]
	var obj *kubeapi.Task
	var seq int64
	var prev *v1alpha1.TaskStatus
	var server kubeapi.TaskStatus
	if h != nil {
		obj, seq, prev = h.obj.DeepCopy(), h.seq, h.written
		server = h.gens.toServer(status)
	}
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%s on node %s: %w", path, s.cfg.Node, kube.ErrFenced)
	}
	if v1alpha1.SameStatus(prev, status) {
		return nil // what the server holds already (a re-apply at shutdown)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := s.claimer.Commit(ctx, obj, seq, func(st *kubeapi.TaskStatus) { *st = *server.DeepCopy() })
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case errors.Is(err, kube.ErrFenced):
		s.lockedFence(path, seq, err.Error())
	case err == nil:
		if s.mu.held[path] == h {
			h.obj, h.written, h.phase = obj, status.DeepCopy(), status.Phase
		}
		signal(s.kick) // an admission may free the next claim
		for _, e := range statusEvents(prev, status) {
			s.record(obj, e)
		}
	}
	return err
}

// lockedFence drops a task this node held under claim seq. REQUIRES: s.mu.
func (s *Source) lockedFence(path string, seq int64, why string) {
	h := s.mu.held[path]
	if h == nil || h.seq != seq {
		return
	}
	delete(s.mu.held, path)
	s.push(spool.Event{Type: spool.Deleted, Path: path})
	s.log.Warn().Str("task", path).Int64("seq", seq).Str("why", why).Msg("fenced: this node lost the task; its batches are killed and its status is never written again under this claim")
	s.record(h.obj, taskEvent{corev1.EventTypeWarning, EventFenced, fmt.Sprintf("node %s lost claim %d (%s): its batches are killed", s.cfg.Node, seq, why)})
}

// reportNoFit writes, unclaimed, that no live node can fit t, with every
// live node's grantable memory, when the governor rejected it for its
// memory and no live Lease publishes enough. Run's goroutine only.
func (s *Source) reportNoFit(ctx context.Context, t *kubeapi.Task, d governor.Decision, leases []coordinationv1.Lease) {
	if d.Budget != governor.BudgetMemory || t.Status.Claim != nil {
		return
	}
	type nodeCap struct {
		node string
		mem  int64
	}
	var caps []nodeCap
	for i := range leases {
		l := &leases[i]
		if l.Spec.HolderIdentity == nil || s.live.Expired(l) {
			continue
		}
		q, err := resource.ParseQuantity(l.Annotations[AnnotationMemory])
		if err != nil {
			continue
		}
		if q.Value() >= d.Need {
			return // a node that could: it claims it when it has room
		}
		caps = append(caps, nodeCap{*l.Spec.HolderIdentity, q.Value()})
	}
	sort.Slice(caps, func(i, j int) bool { return caps[i].node < caps[j].node })
	parts := make([]string, len(caps))
	for i, c := range caps {
		parts[i] = c.node + " " + governor.FormatBytes(c.mem)
	}
	msg := fmt.Sprintf("its smallest batch needs %s of memory and no node can grant that much: %s", governor.FormatBytes(d.Need), strings.Join(parts, ", "))
	if s.reportUnclaimed(ctx, t, v1alpha1.ConditionAdmitted, ReasonNoNodeFits, msg) {
		s.log.Warn().Str("task", Path(t.Namespace, t.Name)).Msg(msg)
	}
}

// reportUnclaimed writes, on a task nobody holds, why it does not run
// (a False condition; phase Pending), unless it says so already; a
// conflict (another node wrote first) is ignored. It reports whether it
// wrote. Run's goroutine only.
func (s *Source) reportUnclaimed(ctx context.Context, t *kubeapi.Task, typ, reason, msg string) bool {
	for _, c := range t.Status.Conditions {
		if c.Type == typ && c.Reason == reason && c.Message == msg {
			return false
		}
	}
	next := t.DeepCopy()
	st := &next.Status.TaskStatus
	// The condition is written for the spec as it is now.
	st.ObservedGeneration = t.Generation
	if st.Phase == "" {
		if err := st.SetPhase(v1alpha1.PhasePending); err != nil {
			s.log.Error().Str("task", Path(t.Namespace, t.Name)).Err(err).Msg("BUG: condition not written")
			return false
		}
	}
	st.SetCondition(typ, metav1.ConditionFalse, reason, msg)
	if err := s.client.Status().Update(ctx, next); err != nil {
		s.log.Debug().Str("task", Path(t.Namespace, t.Name)).Err(err).Msg("condition not written")
		return false
	}
	return true
}
