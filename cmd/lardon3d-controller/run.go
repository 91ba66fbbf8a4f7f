package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/metrics"
	"github.com/lardon3d/lardon3d-controller/pkg/probe"
	"github.com/lardon3d/lardon3d-controller/pkg/queue"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/scratch"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// budgetConfig is the budget part of the configuration, from --config FILE
// and flags (flags win).
type budgetConfig struct {
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
	// admissions wait (negative: never).
	LoadThreshold *float64 `json:"loadThreshold,omitempty"`
	// IOPressureThreshold is the PSI io some avg10 percentage above which
	// admissions holding IO slots wait (negative: never).
	IOPressureThreshold *float64 `json:"ioPressureThreshold,omitempty"`
}

// budgetFlags registers the budget flags on cmd and returns a loader that
// merges them over the --config file.
func budgetFlags(cmd *cobra.Command) func() (budgetConfig, error) {
	var (
		configFile                        string
		memCap, memRes                    string
		cpusRes, ioSlots, gpuSlots, maxPa int
		scratch                           []string
		loadThr, ioThr                    float64
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
	f.Float64Var(&loadThr, "load-threshold", 0, "1-minute load per usable CPU above which new admissions wait (0: the governor's 1.5; negative: never)")
	f.Float64Var(&ioThr, "io-pressure-threshold", 0, "PSI io some avg10 % above which IO-heavy admissions wait (0: the governor's 40; negative: never)")
	return func() (budgetConfig, error) {
		var bc budgetConfig
		if configFile != "" {
			data, err := os.ReadFile(configFile)
			if err != nil {
				return bc, fmt.Errorf("--config: %w", err)
			}
			if err := yaml.UnmarshalStrict(data, &bc); err != nil {
				return bc, fmt.Errorf("--config %s: %w", configFile, err)
			}
		}
		qty := func(flag, v string, into **resource.Quantity) error {
			if !f.Changed(flag) {
				return nil
			}
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return fmt.Errorf("--%s %q: %w", flag, v, err)
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
		return bc, nil
	}
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
	return cfg
}

// newMachine builds the probe and the governor for a budget configuration.
// leasePrefix names scratch lease directories (scratch.Leases.Prefix).
func newMachine(bc budgetConfig, leasePrefix string) (*governor.Governor, reconcile.SnapshotFunc, error) {
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
	return gov, p.Snapshot, nil
}

func newRunCommand(g *globals) *cobra.Command {
	var (
		exitWhenDone bool
		allowShared  bool
		metricsAddr  string
		withPprof    bool
		stateDir     string
		killGrace    time.Duration
		deleteGrace  time.Duration
		provisional  string
		batchPolicy  string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the controller on a spool directory",
		Args:  cobra.NoArgs,
	}
	loadBudgets := budgetFlags(cmd)
	f := cmd.Flags()
	f.BoolVar(&exitWhenDone, "exit-when-done", false, "exit once every task is settled: 0 if all are Done, 1 otherwise")
	f.BoolVar(&allowShared, "allow-shared-spool", false, "accept a spool directory writable by group or others")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9464)")
	f.BoolVar(&withPprof, "pprof", false, "also serve the Go profiler under /debug/pprof/ on --metrics-addr")
	f.StringVar(&stateDir, "state-dir", "", "where logs and items files go (default SPOOL/.lardon3d)")
	f.DurationVar(&killGrace, "kill-grace", 10*time.Second, "SIGTERM to SIGKILL delay when a batch is cancelled")
	f.StringVar(&batchPolicy, "batch-policy", reconcile.BatchLargest, "which batch among those that fit: largest, or efficient (the least predicted time per item, once a profile's batches showed larger ones cost more per item)")
	f.StringVar(&provisional, "provisional-memory", "25%", "what the first batch of a task with no estimate and no history reserves: a share of the memory capacity (25%) or a quantity (1Gi), clamped to what is free")
	f.DurationVar(&deleteGrace, "delete-grace", spool.DefaultDeleteGrace, "how long a vanished manifest may take to come back (an editor's save) or to reappear renamed before its task is cancelled")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := newLogger(g, cmd.ErrOrStderr())
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
		if deleteGrace <= 0 {
			return &exitError{code: 2, err: fmt.Errorf("--delete-grace: must be > 0, got %s", deleteGrace)}
		}
		// One controller per spool, before anything else touches it.
		if stateDir == "" {
			stateDir = filepath.Join(g.spool, ".lardon3d")
		}
		lock, err := spool.Lock(g.spool, stateDir)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer lock.Unlock()
		spoolAbs, err := filepath.Abs(g.spool)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		leases := scratch.New(spoolAbs, bc.ScratchDirs, log)
		gov, snapshot, err := newMachine(bc, leases.Prefix())
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer gov.Close()
		sp, err := spool.Open(g.spool, spool.Options{AllowShared: allowShared, Logger: log, DeleteGrace: deleteGrace})
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer sp.Close()
		m := metrics.New(gov)
		if metricsAddr != "" {
			ln, err := net.Listen("tcp", metricsAddr)
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("--metrics-addr: %w", err)}
			}
			srv := &http.Server{Handler: m.Handler(withPprof), ReadHeaderTimeout: 5 * time.Second}
			go func() {
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error().Err(err).Msg("metrics server stopped")
				}
			}()
			defer srv.Close()
			log.Info().Str("addr", ln.Addr().String()).Msg("serving metrics")
		}
		qcfg := queue.Config{}
		if bc.MaxParallel != nil {
			qcfg.MaxParallel = *bc.MaxParallel
		}
		ctrl := reconcile.New(reconcile.Config{
			SpoolDir:     g.spool,
			StateDir:     stateDir,
			ExitWhenDone: exitWhenDone,
			KillGrace:    killGrace,
			Queue:        qcfg,

			ProvisionalFraction: provFrac,
			ProvisionalBytes:    provBytes,
			BatchPolicy:         batchPolicy,
		}, reconcile.Deps{Spool: sp, Governor: gov, Snapshot: snapshot, Scratch: leases, Metrics: m, Logger: log})

		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		out, err := ctrl.Run(ctx)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if exitWhenDone {
			printTable(cmd.OutOrStdout(), out.Tasks, time.Now())
			if !out.AllDone {
				return &exitError{code: 1}
			}
		}
		return nil
	}
	return cmd
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
