package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/cgroup"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/metrics"
	"github.com/lardon3d/lardon3d-controller/pkg/probe"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
	"github.com/lardon3d/lardon3d-controller/pkg/runner"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
	"github.com/lardon3d/lardon3d-controller/pkg/webview"
)

// budgetConfig is the configuration, from --config FILE and flags (flags
// win): the budgets, and for run the spools it serves and where the
// learned history is.
type budgetConfig struct {
	// Spools are the spool directories (or patterns of them) run serves.
	Spools []string `json:"spools,omitempty"`
	// History is the learned history's store (default: the machine's).
	History string `json:"history,omitempty"`
	// ViewAdminGroup is the group whose members see every user's tasks
	// in the web view, as root does (run --view-admin-group).
	ViewAdminGroup string `json:"viewAdminGroup,omitempty"`
	// Share lets this controller run beside others that say so too, each
	// with its MemoryCapacity, fitting together in the machine's memory.
	Share bool `json:"share,omitempty"`
	// MemoryCapacity bounds the memory budget below what the machine has.
	MemoryCapacity *resource.Quantity `json:"memoryCapacity,omitempty"`
	// MemoryReserved is the system margin.
	MemoryReserved *resource.Quantity `json:"memoryReserved,omitempty"`
	// CPUsReserved are logical CPUs kept for the system.
	CPUsReserved *int `json:"cpusReserved,omitempty"`
	// IOSlots caps heavy concurrent IO.
	IOSlots *int `json:"ioSlots,omitempty"`
	// GPUSlots caps concurrent GPU work.
	GPUSlots *int `json:"gpuSlots,omitempty"`
	// MaxParallel caps the tasks running at once (0: as many as admitted).
	MaxParallel *int `json:"maxParallel,omitempty"`
	// ScratchDirs are directories usable for scratch leases.
	ScratchDirs []string `json:"scratchDirs,omitempty"`
	// LoadThreshold is the 1-minute load per usable CPU above which new
	// admissions wait where the kernel has no PSI (negative: the CPU gate
	// is off, CPU pressure included).
	LoadThreshold *float64 `json:"loadThreshold,omitempty"`
	// CPUPressureThreshold is the PSI cpu some avg10 percentage above which
	// new admissions wait (negative: the CPU gate is off, the load average
	// included).
	CPUPressureThreshold *float64 `json:"cpuPressureThreshold,omitempty"`
	// CPUGateMaxWait bounds the CPU gate's wait while none of our batches
	// runs (negative: no bound).
	CPUGateMaxWait *metav1.Duration `json:"cpuGateMaxWait,omitempty"`
	// IOPressureThreshold is the PSI io some avg10 percentage above which
	// admissions holding IO slots wait (negative: never).
	IOPressureThreshold *float64 `json:"ioPressureThreshold,omitempty"`
	// PriorityClasses, DefaultPriority, PriorityMaxAge, FairShareHalfLife,
	// Shares, Accounts and Quotas decide between people (fairConfig).
	PriorityClasses   map[string]int64       `json:"priorityClasses,omitempty"`
	DefaultPriority   *intstr.IntOrString    `json:"defaultPriority,omitempty"`
	PriorityMaxAge    *metav1.Duration       `json:"priorityMaxAge,omitempty"`
	FairShareHalfLife *metav1.Duration       `json:"fairShareHalfLife,omitempty"`
	Shares            map[string]float64     `json:"shares,omitempty"`
	Accounts          map[string]string      `json:"accounts,omitempty"`
	Quotas            map[string]quotaConfig `json:"quotas,omitempty"`
	// MemoryPressureSoft is the available memory under which new
	// admissions wait for the programs outside the batches (default: the
	// memory margin; -1: off); MemoryPressureHard the one under which a
	// batch yields (default: half the soft one; -1: off).
	MemoryPressureSoft *resource.Quantity `json:"memoryPressureSoft,omitempty"`
	MemoryPressureHard *resource.Quantity `json:"memoryPressureHard,omitempty"`
	// SwapFallRate is how fast swap and zram free may fall, per second,
	// before a batch yields (default 64Mi; -1: off).
	SwapFallRate *resource.Quantity `json:"swapFallRate,omitempty"`
}

// fair is the part of bc that decides between people.
func (bc budgetConfig) fair() fairConfig {
	return fairConfig{PriorityClasses: bc.PriorityClasses, DefaultPriority: bc.DefaultPriority, PriorityMaxAge: bc.PriorityMaxAge,
		FairShareHalfLife: bc.FairShareHalfLife, Shares: bc.Shares, Accounts: bc.Accounts, Quotas: bc.Quotas}
}

// budgetFlags registers the budget flags on cmd and returns a loader that
// merges them over the --config file.
func budgetFlags(cmd *cobra.Command) func() (budgetConfig, error) {
	var (
		configFile                        string
		memCap, memRes                    string
		pressSoft, pressHard, swapFall    string
		cpusRes, ioSlots, gpuSlots, maxPa int
		scratch                           []string
		loadThr, ioThr, cpuThr            float64
		cpuMaxWait                        time.Duration
	)
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML file with budget settings (flags override it)")
	f.StringVar(&memCap, "memory-capacity", "", "memory budget capacity, below what the machine has (e.g. 8Gi)")
	f.StringVar(&memRes, "memory-reserved", "", "memory kept free of reservations for the system (default max(512Mi, 5%); -1: none)")
	f.IntVar(&cpusRes, "cpus-reserved", 0, "logical CPUs kept for the system (0: the governor's default, none on 2 CPUs; negative: none)")
	f.IntVar(&ioSlots, "io-slots", 0, "heavy-IO slots (default: the governor's)")
	f.IntVar(&gpuSlots, "gpu-slots", 0, "GPU slots (default: one per GPU)")
	f.IntVar(&maxPa, "max-parallel", 0, "most tasks running at once (0: as many as the governor admits)")
	f.StringSliceVar(&scratch, "scratch-dir", nil, "directory usable for scratch leases (repeatable)")
	f.Float64Var(&loadThr, "load-threshold", 0, "CPU gate without PSI: 1-minute load per usable CPU above which new admissions wait (0: the governor's 1.5; negative: the CPU gate is off, PSI included)")
	f.Float64Var(&cpuThr, "cpu-pressure-threshold", 0, "CPU gate where the kernel has PSI: cpu some % above which new admissions wait (0: the governor's 60; negative: the CPU gate is off, the load average included)")
	f.DurationVar(&cpuMaxWait, "cpu-gate-max-wait", 0, "longest the CPU gate holds a batch while none of ours runs; then it is admitted however busy the CPU (0: the governor's 30s; negative: no bound)")
	f.Float64Var(&ioThr, "io-pressure-threshold", 0, "PSI io some avg10 % above which IO-heavy admissions wait (0: the governor's 40; negative: never)")
	f.StringVar(&pressSoft, "memory-pressure-soft", "", "available memory under which new admissions wait, the programs outside the batches pressing (default: the memory margin, max(512Mi, 5%); -1: off)")
	f.StringVar(&pressHard, "memory-pressure-hard", "", "available memory under which one batch yields (is evicted) to the programs outside the batches (default: half the soft threshold; -1: off)")
	f.StringVar(&swapFall, "swap-fall-rate", "", "swap and zram free falling this fast per second makes one batch yield (default 64Mi; -1: off)")
	return func() (budgetConfig, error) {
		var bc budgetConfig
		if configFile != "" {
			data, err := os.ReadFile(configFile)
			if err != nil {
				return bc, fmt.Errorf("--config: %w", err)
			}
			// An empty file (or only comments) asks for the defaults.
			if err := v1alpha1.DecodeStrict(data, &bc); err != nil && !errors.Is(err, v1alpha1.ErrEmptyManifest) {
				return bc, configError(configFile, err)
			}
		}
		qty := func(flag, v string, into **resource.Quantity) error {
			if !f.Changed(flag) {
				return nil
			}
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return fmt.Errorf("--%s %q: %s", flag, v, v1alpha1.QuantityError(v))
			}
			*into = &q
			return nil
		}
		if err := qty("memory-capacity", memCap, &bc.MemoryCapacity); err != nil {
			return bc, err
		}
		if err := qty("memory-reserved", memRes, &bc.MemoryReserved); err != nil {
			return bc, err
		}
		for _, p := range []struct {
			flag, v string
			into    **resource.Quantity
		}{{"memory-pressure-soft", pressSoft, &bc.MemoryPressureSoft}, {"memory-pressure-hard", pressHard, &bc.MemoryPressureHard}, {"swap-fall-rate", swapFall, &bc.SwapFallRate}} {
			if err := qty(p.flag, p.v, p.into); err != nil {
				return bc, err
			}
		}
		for flag, pair := range map[string]struct {
			v    int
			into **int
		}{"cpus-reserved": {cpusRes, &bc.CPUsReserved}, "io-slots": {ioSlots, &bc.IOSlots}, "gpu-slots": {gpuSlots, &bc.GPUSlots}, "max-parallel": {maxPa, &bc.MaxParallel}} {
			if f.Changed(flag) {
				if pair.v < 0 {
					return bc, fmt.Errorf("--%s: must be >= 0, got %d", flag, pair.v)
				}
				v := pair.v
				*pair.into = &v
			}
		}
		if f.Changed("scratch-dir") {
			bc.ScratchDirs = scratch
		}
		if f.Changed("load-threshold") {
			bc.LoadThreshold = &loadThr
		}
		if f.Changed("io-pressure-threshold") {
			bc.IOPressureThreshold = &ioThr
		}
		if f.Changed("cpu-pressure-threshold") {
			bc.CPUPressureThreshold = &cpuThr
		}
		if f.Changed("cpu-gate-max-wait") {
			bc.CPUGateMaxWait = &metav1.Duration{Duration: cpuMaxWait}
		}
		return bc, nil
	}
}

// configError shows the problems of a --config file one per line, each as
// FILE:LINE: problem, as compilers do.
func configError(file string, err error) error {
	var list v1alpha1.ErrorList
	if !errors.As(err, &list) {
		return fmt.Errorf("--config %s: %w", file, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--config %s: %d problem(s)", file, len(list))
	for _, e := range list {
		b.WriteString("\n  ")
		b.WriteString(file)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
		b.WriteString(e.Error())
	}
	return errors.New(b.String())
}

// warnings lists the settings that are legal but likely mistakes: a memory
// amount without its unit.
func (bc budgetConfig) warnings() []string {
	var out []string
	for _, q := range []struct {
		name string
		q    *resource.Quantity
	}{{"memoryCapacity", bc.MemoryCapacity}, {"memoryReserved", bc.MemoryReserved}} {
		if q.q != nil {
			if w := v1alpha1.SmallMemoryWarning(*q.q); w != "" {
				out = append(out, q.name+" "+q.q.String()+" "+w)
			}
		}
	}
	return out
}

// capWarning says that the requested memory capacity exceeds what the
// machine (or its cgroup) has, and what the budget was capped to; "" when
// it does not.
func (bc budgetConfig) capWarning(gov *governor.Governor) string {
	if bc.MemoryCapacity == nil || bc.MemoryCapacity.Value() <= 0 {
		return ""
	}
	want, got := bc.MemoryCapacity.Value(), gov.Budgets().Memory.Capacity
	if got >= want {
		return ""
	}
	return fmt.Sprintf("memoryCapacity %s is more than this machine has: the memory budget is capped to %s (its RAM or cgroup limit)", bc.MemoryCapacity.String(), humanBytes(got))
}

// governorConfig converts the budget configuration.
func (bc budgetConfig) governorConfig() governor.Config {
	var cfg governor.Config
	if bc.MemoryCapacity != nil {
		cfg.MemoryCapacity = bc.MemoryCapacity.Value()
	}
	if bc.MemoryReserved != nil {
		cfg.MemoryReserved = bc.MemoryReserved.Value()
	}
	if bc.CPUsReserved != nil {
		cfg.CPUsReserved = *bc.CPUsReserved
	}
	if bc.IOSlots != nil {
		cfg.IOSlots = *bc.IOSlots
	}
	if bc.GPUSlots != nil {
		cfg.GPUSlots = *bc.GPUSlots
	}
	if bc.LoadThreshold != nil {
		cfg.LoadThreshold = *bc.LoadThreshold
	}
	if bc.IOPressureThreshold != nil {
		cfg.IOPressureThreshold = *bc.IOPressureThreshold
	}
	if bc.CPUPressureThreshold != nil {
		cfg.CPUPressureThreshold = *bc.CPUPressureThreshold
	}
	if bc.CPUGateMaxWait != nil {
		cfg.CPUGateMaxWait = bc.CPUGateMaxWait.Duration
	}
	for _, p := range []struct {
		q    *resource.Quantity
		into *int64
	}{{bc.MemoryPressureSoft, &cfg.MemoryPressureSoft}, {bc.MemoryPressureHard, &cfg.MemoryPressureHard}, {bc.SwapFallRate, &cfg.SwapFallRate}} {
		if p.q != nil {
			*p.into = p.q.Value()
		}
	}
	return cfg
}

// newMachine builds the probe and the governor for a budget configuration.
// leasePrefix names scratch lease directories (scratch.Leases.Prefix).
func newMachine(bc budgetConfig, leasePrefix string) (*governor.Governor, *probe.Prober, error) {
	p, err := probe.New(probe.Options{ScratchDirs: bc.ScratchDirs})
	if err != nil {
		return nil, nil, fmt.Errorf("probe: %w", err)
	}
	gov := governor.New(bc.governorConfig(), governor.WithLeasePrefix(leasePrefix))
	snap, err := p.Snapshot()
	if err != nil {
		return nil, nil, fmt.Errorf("probe: %w", err)
	}
	gov.Update(snap)
	return gov, p, nil
}

func newRunCommand(g *globals) *cobra.Command {
	var (
		exitWhenDone bool
		joinRun      bool
		allowShared  bool
		metricsAddr  string
		httpAddr     string
		viewInterval time.Duration
		withPprof    bool
		historyPath  string
		spoolArgs    []string
		share        bool
		killGrace    time.Duration
		deleteGrace  time.Duration
		cgroupMode   string
		cgroupParent string
		waitForTasks int
		provisional  string
		batchPolicy  string
		logMaxSize   string
		pidsMax      int64
		viewAdmins   string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the controller on one or more spool directories",
		Long: `Run the controller on one or more spool directories until interrupted
or, with --exit-when-done, until every task is settled.

One controller governs the machine: it serves every spool given (--spool
A --spool B, or spools: in --config), with one memory budget, one queue in
arrival order across spools and one learned history. A second controller
on the same machine is refused, naming the first; two that both say --share,
each with a --memory-capacity, run side by side when their capacities fit
in the machine's memory together. Run as root (the system service), it
serves other users' spools and runs each task as the spool's owner.

` + exitCodesHelp,
		Args: cobra.NoArgs,
	}
	loadBudgets := budgetFlags(cmd)
	f := cmd.Flags()
	// run's --spool repeats, and shadows the global one.
	f.StringArrayVar(&spoolArgs, "spool", nil, "spool directory to serve, or a pattern of them such as '/home/*/spool' (repeatable; default: spools: in --config, else $LARDON3D_SPOOL, else .)")
	f.BoolVar(&exitWhenDone, "exit-when-done", false, "exit once every task is settled (terminal, paused before admission, or held by dependencies that are): 0 if all are Done, 1 otherwise")
	f.BoolVar(&joinRun, "join-running", false, "with --exit-when-done and one --spool: where a controller (root's or yours) already runs on this machine, serve the spool through it (spool add), wait until every task is settled, print the table and remove it, instead of refusing to start")
	f.IntVar(&waitForTasks, "wait-for-tasks", 0, "with --exit-when-done, never exit before this many manifests were seen (start the controller, then drop files)")
	f.BoolVar(&allowShared, "allow-shared-spool", false, "accept a spool directory writable by group or others")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9464; a port alone, :9464, listens on loopback only)")
	f.StringVar(&httpAddr, "http-addr", "", "serve the read-only web view (the machine over time, the batches' timeline, the task graph) on this address; a port alone (:9465) listens on loopback only; there it needs the token in view-token beside the learned history, and each user opens their own view with 'lardon3d-controller view' (default: on --metrics-addr when given, else none)")
	f.StringVar(&viewAdmins, "view-admin-group", "", "the group (name or number) whose members see every user's tasks and logs in the web view, as root does (default: root alone); everyone else sees their own spools'")
	f.DurationVar(&viewInterval, "view-interval", webview.DefaultInterval, "how often the web view samples the machine's budgets and measures (it keeps the last 6 hours, at most 6h ÷ this many points)")
	f.BoolVar(&withPprof, "pprof", false, "also serve the Go profiler under /debug/pprof/ on --metrics-addr")
	f.StringVar(&historyPath, "history", "", "the learned history's store, shared by every spool (default: $STATE_DIRECTORY, $XDG_STATE_HOME/lardon3d, /var/lib/lardon3d as root, else ~/.local/state/lardon3d; file history.db)")
	f.BoolVar(&share, "share", false, "run beside other controllers of this machine that say --share too, within --memory-capacity (required), all capacities fitting in the machine's memory")
	f.DurationVar(&killGrace, "kill-grace", 10*time.Second, "SIGTERM to SIGKILL delay when a batch is cancelled")
	f.StringVar(&cgroupMode, "cgroups", "auto", "one cgroup per batch, so the kernel enforces its memory limit and kills every process it started: auto (use them where the machine allows, else the RSS sampler, with a warning), required (refuse to start without), off")
	f.StringVar(&cgroupParent, "cgroup-parent", "", "cgroup path (as in /proc/self/cgroup) under which the batches' cgroups are created (default: the controller's own cgroup)")
	f.StringVar(&batchPolicy, "batch-policy", reconcile.BatchEfficient, "which batch among those that fit: efficient (each task's share of memory beside the tasks ready to run, and, once a profile's batches showed larger ones cost more per item, the largest batch within 5% of the least predicted time per item) or largest (the largest that fits)")
	f.StringVar(&provisional, "provisional-memory", "25%", "what the first batch of a task with no estimate and no history reserves: a share of the memory capacity (25%) or a quantity (1Gi), clamped to what is free")
	f.Int64Var(&pidsMax, "pids-max", runner.DefaultPidsMax, "most processes and threads one batch may have at once (its cgroup's pids.max, where the pids controller is available): a fork bomb stops there; 0: no bound")
	f.StringVar(&logMaxSize, "log-max-size", "32Mi", "cap of each task's log: beyond it, the log's content moves to LOG.1 (replacing what was there) and the log starts again; 0: no cap")
	f.DurationVar(&deleteGrace, "delete-grace", spool.DefaultDeleteGrace, "how long a vanished manifest may take to come back (an editor's save) or to reappear renamed before its task is cancelled")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := newLogger(g, cmd.ErrOrStderr())
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		logMax, err := parseLogMaxSize(logMaxSize)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		provFrac, provBytes, err := parseProvisional(provisional)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if batchPolicy != reconcile.BatchLargest && batchPolicy != reconcile.BatchEfficient {
			return &exitError{code: 2, err: fmt.Errorf("--batch-policy %q: want largest or efficient", batchPolicy)}
		}
		bc, err := loadBudgets()
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if waitForTasks < 0 {
			return &exitError{code: 2, err: fmt.Errorf("--wait-for-tasks: must be >= 0, got %d", waitForTasks)}
		}
		if deleteGrace <= 0 {
			return &exitError{code: 2, err: fmt.Errorf("--delete-grace: must be > 0, got %s", deleteGrace)}
		}
		if joinRun {
			if !exitWhenDone || len(spoolArgs) != 1 || hasMeta(spoolArgs[0]) {
				return &exitError{code: 2, err: errors.New("--join-running: with --exit-when-done and one --spool only")}
			}
			if joined, err := joinRunning(cmd, spoolArgs[0]); joined {
				return err
			}
		}
		entries := spoolArgs
		if len(entries) == 0 {
			entries = bc.Spools
		}
		if len(entries) == 0 {
			entries = []string{g.spool}
		}
		found, skipped, err := expandSpools(entries)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		for _, err := range skipped {
			log.Warn().Err(err).Msg("not served")
		}
		if len(found) == 0 {
			return &exitError{code: 2, err: fmt.Errorf("no spool to serve: %s matched no directory", strings.Join(entries, ", "))}
		}
		spools := make([]string, 0, len(found))
		for _, e := range found {
			spools = append(spools, e.dir)
		}
		if g.stateDirFlag != "" && len(spools) > 1 {
			return &exitError{code: 2, err: errors.New("--state-dir: one spool only (each spool of several keeps its state in its own directory)")}
		}
		if historyPath == "" {
			historyPath = bc.History
		}
		if historyPath == "" {
			historyPath = defaultHistoryPath()
		}
		if f.Changed("share") {
			bc.Share = share
		}
		leases := scratch.New(spools[0], bc.ScratchDirs, log)
		gov, prober, err := newMachine(bc, leases.Prefix())
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer gov.Close()
		// One controller per spool, then one per machine, before anything
		// else touches them. A spool a pattern matched that cannot be
		// served (its mode, another controller on it) is skipped, and tried
		// again by the rescans; a spool named plainly is the operator's
		// and fatal.
		sopts := spool.Options{AllowShared: allowShared, Logger: log, DeleteGrace: deleteGrace}
		var opened []*openedSpool
		defer func() {
			for _, o := range opened {
				o.close() // those not handed to the host (an early return)
			}
		}()
		var placed []placedSpool
		for _, e := range found {
			o, err := openSpool(e.dir, g.stateDirFlag, sopts)
			if err != nil && e.byPattern {
				log.Warn().Err(err).Str("spool", e.dir).Msg("not served; tried again every 10 s")
				continue
			}
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			opened = append(opened, o)
			placed = append(placed, o.placedSpool)
		}
		if len(opened) == 0 {
			return &exitError{code: 2, err: errors.New("no spool to serve: none of the spools the patterns match can be served (see the warnings)")}
		}
		claim, err := claimMachine(bc, placed, prober.Snapshot)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer func() { _ = claim.Release() }()
		for _, c := range claim.Beside() {
			// Never in the way of root's: it stops once it reads our claim.
			log.Warn().Int("pid", c.PID).Int("uid", c.UID).Str("user", c.User).Strs("spools", c.Spools).
				Msg("a user's controller runs on this machine; it stops within seconds, seeing this one (the system's) registered, and the spools it served are served here once the configuration names them")
		}
		cgroups, err := openCgroups(cgroupMode, cgroupParent, placed[0].stateDir, log)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer removeCgroups(cgroups, log) // once Run returned: every batch's group is gone
		if cgroups == nil {
			// Without cgroups, a process that leaves its batch's group
			// and whose parent ends comes back to the controller, which
			// finds it by its batch's marker and reaps it.
			orphans, stopOrphans := context.WithCancel(context.Background())
			defer stopOrphans()
			if err := runner.AdoptOrphans(orphans); err != nil {
				log.Warn().Err(err).Msg("processes that leave their batch's process group and lose their parent are not re-parented to the controller")
			}
		}
		// Behind the user's programs for the kernel's OOM killer, where
		// it may be (the batches run ahead of them: runner.BatchOOMScoreAdj).
		if adj, err := runner.LowerOwnOOMScoreAdj(); err != nil {
			log.Info().Err(err).Int("oomScoreAdj", adj).Msg("the controller keeps its oom_score_adj (lowering it needs CAP_SYS_RESOURCE); batches still run ahead of every other program")
		}
		for _, w := range bc.warnings() {
			log.Warn().Msg(w)
		}
		if w := bc.capWarning(gov); w != "" {
			log.Warn().Msg(w)
		}
		m := metrics.New(gov)
		qcfg := queue.Config{}
		if bc.MaxParallel != nil {
			qcfg.MaxParallel = *bc.MaxParallel
		}
		defPrio, err := bc.fair().apply(&qcfg)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--config: %w", err)}
		}
		cfg := reconcile.Config{
			SpoolDir:     placed[0].dir,
			StateDir:     placed[0].stateDir,
			ExitWhenDone: exitWhenDone,
			WaitForTasks: waitForTasks,
			KillGrace:    killGrace,
			LogMaxBytes:  logMax,
			PidsMax:      pidsMaxConfig(pidsMax),
			Queue:        qcfg,
			HistoryPath:  historyPath,

			ProvisionalFraction: provFrac,
			ProvisionalBytes:    provBytes,
			BatchPolicy:         batchPolicy,
		}
		cfg.PriorityClasses, cfg.DefaultPriority = bc.PriorityClasses, defPrio
		host := reconcile.NewHost(cfg, reconcile.Deps{Governor: gov, Snapshot: prober.Snapshot, GPUMemory: prober, MemoryDomain: prober.MemoryDomain, Scratch: leases, Cgroups: cgroups, Metrics: m, Logger: log})
		m.WatchAccounts(func() []metrics.AccountSample { return accountSamples(host.Shares()) })
		// The series are the machine's, every spool's tasks: kept beside the
		// learned history, not in one spool's state directory.
		if !f.Changed("view-admin-group") {
			viewAdmins = bc.ViewAdminGroup
		}
		admins, err := webview.AdminGroup(viewAdmins)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--view-admin-group: %w", err)}
		}
		// The view's socket is beside the claim, where `view` finds it.
		socket := filepath.Join(filepath.Dir(claim.Path()), webview.SocketName(os.Getpid()))
		stopHTTP, err := serveHTTP(httpOptions{metricsAddr: metricsAddr, viewAddr: httpAddr, pprof: withPprof, viewInterval: viewInterval,
			viewSocket: socket, admins: admins}, m, host, filepath.Dir(historyPath), log)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer stopHTTP()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		served := &servedSpools{host: host, cfg: cfg, fair: bc.fair(), log: log, claim: claim, observe: m.ObserveListing, ctx: ctx,
			opts: sopts, failed: map[string]string{}}
		defer served.close() // once Run returned
		for _, o := range opened {
			if err := served.serve(o, false); err != nil {
				return &exitError{code: 2, err: err}
			}
		}
		opened = nil // the host's now: served.close closes them
		log.Info().Strs("spools", served.dirs()).Str("history", historyPath).Str("registered", claim.Path()).Msg("serving")
		if slices.ContainsFunc(entries, hasMeta) {
			// Run is started below; a Join before it is refused and
			// tried again at the next rescan.
			served.watch(ctx, entries)
		}
		if ctl := startControl(claim, host, served, log); ctl != nil {
			defer ctl.Close() // before the governor's Close: every hold released
		}
		tuneGC(ctx)
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(sigs)
		var got os.Signal
		go func() {
			select {
			case got = <-sigs:
				cancel()
			case <-ctx.Done():
			}
		}()
		// A controller of another user stops once root's (the system
		// service) registers: one governor per machine.
		displaced := claim.Displaced(ctx, 2*time.Second)
		systemSeen := make(chan *registry.Claim, 1)
		go func() {
			var system *registry.Claim
			if c, ok := <-displaced; ok {
				system = &c
				log.Error().Int("pid", c.PID).Strs("spools", c.Spools).Msg("the system service now runs on this machine: this controller stops (every batch stopped, every status written)")
				cancel()
			}
			systemSeen <- system // once the watch ended (ctx)
		}()
		out, err := host.Run(ctx)
		cancel()
		if system := <-systemSeen; system != nil {
			return &exitError{code: 2, err: fmt.Errorf("stopped: a controller runs as root on this machine (the system service), and one governor serves a machine: %s; its configuration may serve your spool (~/lardon3d/spool), or ask root to add it", system.Describe())}
		}
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if exitWhenDone {
			printTable(cmd.OutOrStdout(), out.Tasks, time.Now())
			if out.Refused > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "%s refused, never run (see \"ignoring manifest\" above)\n", governor.Count(int64(out.Refused), "manifest"))
			}
		}
		if exitWhenDone && ctx.Err() != nil && got != nil {
			// A script waited for the tasks to settle and they did not: not
			// a success, and not a task's failure either. Without
			// --exit-when-done a signal is how the controller is stopped.
			// Read after cancel: the goroutine wrote got before cancelling.
			code, name := exitInterrupted, "SIGINT"
			if got == syscall.SIGTERM {
				code, name = exitTerminated, "SIGTERM"
			}
			return &exitError{code: code, err: fmt.Errorf("stopped by %s before every task settled; every batch was stopped and every status written, a new run continues", name)}
		}
		if exitWhenDone && !out.AllDone {
			return &exitError{code: exitNotDone}
		}
		return nil
	}
	return cmd
}

// openCgroups opens the subtree of the batches' cgroups for --cgroups mode:
// nil (the RSS sampler) with "off", or with "auto" where no memory cgroup
// can be used. The subtree is named after the state directory, so that a
// restarted controller finds what a crashed one left.
func openCgroups(mode, parent, stateDir string, log zerolog.Logger) (*cgroup.Tree, error) {
	switch mode {
	case "off":
		log.Info().Msg("cgroups off: batch memory is watched by the RSS sampler (a burst between two samples is not stopped); processes that leave their process group are found by their batch's marker and ancestry (the controller is their subreaper)")
		return nil, nil
	case "auto", "required":
	default:
		return nil, fmt.Errorf("--cgroups: want auto, required or off, got %q", mode)
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(abs))
	tree, err := cgroup.Open(cgroup.Options{Parent: parent, Name: fmt.Sprintf("lardon3d-%x", sum[:6])})
	if err != nil {
		if mode == "auto" && errors.Is(err, cgroup.ErrUnavailable) && parent == "" {
			log.Warn().Err(err).Msg("no cgroup for the batches: memory is watched by the RSS sampler (a burst between two samples is not stopped; processes that leave their process group are found by their batch's marker and ancestry, not if they clear their environment and lose their parent between two samples); --cgroups required refuses to run like this")
			return nil, nil
		}
		return nil, fmt.Errorf("--cgroups %s: %w", mode, err)
	}
	log.Info().Int("version", tree.Version()).Str("dir", tree.Dir()).Str("setup", tree.Setup()).Msg("each batch runs in a cgroup of its own")
	return tree, nil
}

// removeCgroups removes the subtree once the controller stopped and every
// batch's group is gone, so that a run leaves no cgroup behind (one per
// state directory ever used, else). A group left in it (a process that
// survived its kill) keeps it: the next run on this state directory
// finds it there.
func removeCgroups(tree *cgroup.Tree, log zerolog.Logger) {
	if tree == nil {
		return
	}
	if err := tree.Remove(); err != nil {
		log.Warn().Err(err).Msg("the batches' cgroup subtree is kept")
	}
}

// pidsMaxConfig is --pids-max as reconcile.Config.PidsMax: 0 (no bound)
// is -1 there.
func pidsMaxConfig(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// parseLogMaxSize reads --log-max-size: a quantity, 0 for no cap (-1 in
// reconcile.Config).
func parseLogMaxSize(v string) (int64, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("--log-max-size %q: want a quantity such as 32Mi, or 0 for no cap", v)
	}
	if q.IsZero() {
		return -1, nil
	}
	return max(q.Value(), 4096), nil
}

// parseProvisional reads --provisional-memory: a percentage of the memory
// capacity in (0, 100], or a positive quantity.
func parseProvisional(v string) (fraction float64, bytes int64, err error) {
	if pct, ok := strings.CutSuffix(strings.TrimSpace(v), "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil || f <= 0 || f > 100 {
			return 0, 0, fmt.Errorf("--provisional-memory %q: want a percentage in (0, 100] or a quantity", v)
		}
		return f / 100, 0, nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return 0, 0, fmt.Errorf("--provisional-memory %q: want a percentage in (0, 100] or a quantity", v)
	}
	return 0, q.Value(), nil
}
