package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/control"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/probe"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

func newBudgetsCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "budgets",
		Short: "Show each budget's capacity, margin, reserved and free, and the machine's signals",
		Args:  cobra.NoArgs,
	}
	loadBudgets := budgetFlags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: a table)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		stateDir := g.stateDir()
		w := cmd.OutOrStdout()
		// The running controller's governor itself, with its holds.
		// ownMemory is what the running controller published of its own
		// resident memory, for the header ("" before it did).
		ownMemory := func() string {
			if rss := reconcile.ReadControllerRSS(stateDir); rss > 0 {
				return "; the controller's own memory: RSS " + humanBytes(rss)
			}
			return ""
		}
		if r, pid, ok := controlBudgets(g.spool, g.stateDirFlag); ok {
			source := fmt.Sprintf("live, from the controller running on %s (PID %d, its control socket)", g.spool, pid) + ownMemory()
			return printBudgets(w, *r.Budgets, output, source, nil, r.Holds...)
		}
		// A running controller publishes its live view; use it when fresh.
		if view, at, err := reconcile.ReadBudgets(stateDir); err == nil && time.Since(at) < 10*time.Second {
			source := fmt.Sprintf("live, from the controller running on %s (%s ago)", g.spool, time.Since(at).Round(time.Second)) + ownMemory()
			return printBudgets(w, view, output, source, nil)
		}
		bc, err := loadBudgets()
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		gov, prober, err := newMachine(bc, "")
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		defer gov.Close()
		warns := bc.warnings()
		if w := bc.capWarning(gov); w != "" {
			warns = append(warns, w)
		}
		for _, w := range warns {
			fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
		}
		// No controller runs: what the files say is reserved is stale.
		var held []string
		if files, err := readSpool(g.spool); err == nil {
			for _, f := range files {
				if f.Task != nil && f.Task.Status.Reservation != nil && !v1alpha1.IsTerminal(f.Task.Status.Phase) {
					held = append(held, fmt.Sprintf("%s (%s, %s)", f.Name(), f.Task.Status.Phase, f.Task.Status.Reservation.Memory.String()))
				}
			}
		}
		if err := printBudgets(w, gov.Budgets(), output, "probed now; no controller is running on "+g.spool, held); err != nil || output != "" {
			return err
		}
		printGPUDevices(w, prober.GPUDevices())
		return nil
	}
	return cmd
}

// budgetNumbers is one budget in -o json|yaml, in its unit.
type budgetNumbers struct {
	Capacity int64 `json:"capacity"`
	Margin   int64 `json:"margin"`
	Reserved int64 `json:"reserved"`
	Free     int64 `json:"free"`
}

func numbers(b governor.BudgetState) budgetNumbers {
	return budgetNumbers{Capacity: b.Capacity, Margin: b.Margin, Reserved: b.Reserved, Free: b.Free}
}

type gpuDoc struct {
	ID           string         `json:"id"`
	Name         string         `json:"name,omitempty"`
	Present      bool           `json:"present"`
	Known        bool           `json:"known"`
	Unified      bool           `json:"unified"`
	MemoryBytes  *budgetNumbers `json:"memoryBytes,omitempty"`
	Reservations int            `json:"reservations"`
}

type scratchDoc struct {
	Path       string        `json:"path"`
	Present    bool          `json:"present"`
	Rotational bool          `json:"rotational"`
	Known      bool          `json:"known"`
	Bytes      budgetNumbers `json:"bytes"`
	Leases     int           `json:"leases"`
}

type pressureDoc struct {
	SomeAvg10 float64 `json:"someAvg10"`
	SomeAvg60 float64 `json:"someAvg60"`
	FullAvg10 float64 `json:"fullAvg10"`
	FullAvg60 float64 `json:"fullAvg60"`
}

func pressure(p governor.Pressure) pressureDoc {
	return pressureDoc{SomeAvg10: p.SomeAvg10, SomeAvg60: p.SomeAvg60, FullAvg10: p.FullAvg10, FullAvg60: p.FullAvg60}
}

// budgetsDoc is what budgets -o json|yaml prints: field names are part of
// the command line's interface (lowerCamel, units in the name), kept apart
// from the governor's Go types so that its internals never leak.
type budgetsDoc struct {
	// Source is "live" (the running controller's view) or "probed" (no
	// controller runs: the machine probed now).
	Source      string        `json:"source"`
	TakenAt     *time.Time    `json:"takenAt,omitempty"`
	MemoryBytes budgetNumbers `json:"memoryBytes"`
	CPUThreads  budgetNumbers `json:"cpuThreads"`
	IOSlots     budgetNumbers `json:"ioSlots"`
	GPUSlots    budgetNumbers `json:"gpuSlots"`
	GPUs        []gpuDoc      `json:"gpus"`
	Scratch     []scratchDoc  `json:"scratch"`
	// Reservations is the number of active reservations.
	Reservations         int   `json:"reservations"`
	MemAvailableBytes    int64 `json:"memAvailableBytes"`
	WorkMemoryUsageBytes int64 `json:"workMemoryUsageBytes"`
	// OutsideMemoryBytes is the memory programs outside the batches use;
	// MemoryPressure none, soft (admissions wait) or hard (a batch yields),
	// against the thresholds in force (0: off).
	OutsideMemoryBytes      int64  `json:"outsideMemoryBytes"`
	MemoryPressure          string `json:"memoryPressure"`
	MemoryPressureSoftBytes int64  `json:"memoryPressureSoftBytes"`
	MemoryPressureHardBytes int64  `json:"memoryPressureHardBytes"`
	Load                    struct {
		Avg1      float64  `json:"avg1"`
		Avg5      float64  `json:"avg5"`
		Avg15     float64  `json:"avg15"`
		Threshold *float64 `json:"threshold"` // null: the gate is off
		Deferring bool     `json:"deferring"`
	} `json:"load"`
	// CPUGate is the signal that defers admissions for the CPU:
	// "pressure" (PSI), "load" (the load average) or "off".
	CPUGate string `json:"cpuGate"`
	// CPUGateMaxWaitSeconds bounds the gate's wait while none of our
	// batches runs; null: the gate is off or has no bound.
	CPUGateMaxWaitSeconds *float64 `json:"cpuGateMaxWaitSeconds"`
	Pressure              struct {
		Available    bool        `json:"available"`
		CPU          pressureDoc `json:"cpu"`
		IO           pressureDoc `json:"io"`
		Memory       pressureDoc `json:"memory"`
		CPUGateValue *float64    `json:"cpuGateValue"` // what the CPU gate compares; null: not its signal
		CPUThreshold *float64    `json:"cpuThreshold"` // null: not the CPU gate's signal
		IOThreshold  *float64    `json:"ioThreshold"`  // null: the gate is off
		IODeferring  bool        `json:"ioDeferring"`
	} `json:"pressure"`
	SwapTotalBytes int64 `json:"swapTotalBytes"`
	SwapFreeBytes  int64 `json:"swapFreeBytes"`
	ZramTotalBytes int64 `json:"zramTotalBytes"`
	ZramFreeBytes  int64 `json:"zramFreeBytes"`
	// StaleReservations are manifests still showing the reservation of a
	// stopped controller.
	StaleReservations []string `json:"staleReservations"`
	// Holds are the exec holds, waiting and granted (from the control
	// socket; none when read elsewhere).
	Holds []control.HoldInfo `json:"holds"`
}

// positive is &v when v > 0 (a gate that is on), else nil.
func positive(v float64) *float64 {
	if v > 0 {
		return &v
	}
	return nil
}

func newBudgetsDoc(v governor.BudgetsView, source string, stale []string) budgetsDoc {
	if strings.HasPrefix(source, "live") {
		source = "live"
	} else {
		source = "probed"
	}
	d := budgetsDoc{
		Source: source, MemoryBytes: numbers(v.Memory), CPUThreads: numbers(v.CPU),
		IOSlots: numbers(v.IOSlots), GPUSlots: numbers(v.GPUSlots),
		GPUs: []gpuDoc{}, Scratch: []scratchDoc{}, StaleReservations: append([]string{}, stale...),
		Reservations: v.Reservations, MemAvailableBytes: v.MemAvailable, WorkMemoryUsageBytes: v.WorkMemoryUsage,
		SwapTotalBytes: v.SwapTotal, SwapFreeBytes: v.SwapFree, ZramTotalBytes: v.ZramTotal, ZramFreeBytes: v.ZramFree,
		OutsideMemoryBytes: v.Pressure.Outside, MemoryPressure: v.Pressure.Level.String(),
		MemoryPressureSoftBytes: v.Pressure.Soft, MemoryPressureHardBytes: v.Pressure.Hard,
	}
	if !v.Taken.IsZero() {
		at := v.Taken.UTC()
		d.TakenAt = &at
	}
	for _, g := range v.GPUs {
		gd := gpuDoc{ID: g.ID, Name: g.Name, Present: g.Present, Known: g.Known, Unified: g.Unified, Reservations: g.Reservations}
		if g.Known && !g.Unified {
			m := numbers(g.Memory)
			gd.MemoryBytes = &m
		}
		d.GPUs = append(d.GPUs, gd)
	}
	for _, sc := range v.Scratch {
		d.Scratch = append(d.Scratch, scratchDoc{Path: sc.Path, Present: sc.Present, Rotational: sc.Rotational, Known: !sc.Unknown, Bytes: numbers(sc.Bytes), Leases: sc.Leases})
	}
	d.Load.Avg1, d.Load.Avg5, d.Load.Avg15 = v.Load1, v.Load5, v.Load15
	d.Load.Threshold, d.Load.Deferring = positive(v.LoadThreshold), v.LoadDeferred
	if v.CPUGate {
		d.CPUGateMaxWaitSeconds = positive(v.CPUGateMaxWait.Seconds())
	}
	switch {
	case !v.CPUGate:
		d.CPUGate = "off"
		d.Load.Threshold = nil
	case v.CPUByPSI:
		d.CPUGate = "pressure"
		d.Pressure.CPUThreshold = positive(v.CPUPressureThreshold)
		d.Pressure.CPUGateValue = &v.CPUPressure
		d.Load.Threshold = nil
	default:
		d.CPUGate = "load"
	}
	d.Pressure.Available = v.PSI.Available
	d.Pressure.CPU, d.Pressure.IO, d.Pressure.Memory = pressure(v.PSI.CPU), pressure(v.PSI.IO), pressure(v.PSI.Memory)
	d.Pressure.IOThreshold, d.Pressure.IODeferring = positive(v.IOPressureThreshold), v.IODeferred
	return d
}

func printBudgets(w io.Writer, v governor.BudgetsView, output, source string, stale []string, holds ...control.HoldInfo) error {
	switch output {
	case "json", "yaml":
		doc := newBudgetsDoc(v, source, stale)
		doc.Holds = append([]control.HoldInfo{}, holds...)
		data, err := json.MarshalIndent(doc, "", "  ")
		if err == nil && output == "yaml" {
			data, err = yaml.JSONToYAML(data)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", bytes.TrimRight(data, "\n"))
		return err
	case "":
	default:
		return &exitError{code: 2, err: fmt.Errorf("-o %q: want json or yaml", output)}
	}
	fmt.Fprintf(w, "Budgets (%s)\n", source)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "BUDGET\tCAPACITY\tMARGIN\tRESERVED\tFREE")
	row := func(name string, b governor.BudgetState, bytes bool) {
		f := func(n int64) string { return fmt.Sprint(n) }
		if bytes {
			f = humanBytes
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, f(b.Capacity), f(b.Margin), f(b.Reserved), f(b.Free))
	}
	row("memory", v.Memory, true)
	row("cpu threads", v.CPU, false)
	row("io slots", v.IOSlots, false)
	row("gpu slots", v.GPUSlots, false)
	for _, gpu := range v.GPUs {
		name := "gpu " + gpu.ID + " memory"
		switch {
		case !gpu.Known:
			fmt.Fprintf(tw, "%s\tunknown\t-\t-\t-\n", name)
		case gpu.Unified:
			fmt.Fprintf(tw, "%s\tunified (in memory)\t-\t-\t-\n", name)
		default:
			row(name, gpu.Memory, true)
		}
	}
	for _, s := range v.Scratch {
		row("scratch "+s.Path, s.Bytes, true)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nReservations: %d active\n", v.Reservations)
	fmt.Fprintf(w, "Memory available (kernel): %s\n", humanBytes(v.MemAvailable))
	fmt.Fprintf(w, "Memory used outside the batches (other programs): %s; batches measured: %s; pressure: %s (admissions wait under %s available, a batch yields under %s)\n",
		humanBytes(v.Pressure.Outside), humanBytes(v.Pressure.Batches), v.Pressure.Level, thresholdText(v.Pressure.Soft), thresholdText(v.Pressure.Hard))
	bound := "no bound on its wait (--cpu-gate-max-wait negative)"
	if v.CPUGateMaxWait >= 0 {
		bound = "waits at most " + v.CPUGateMaxWait.String() + " while none of our batches runs (--cpu-gate-max-wait)"
	}
	switch {
	case !v.CPUGate:
		fmt.Fprintf(w, "CPU gate: off (--load-threshold or --cpu-pressure-threshold negative); load %.2f %.2f %.2f\n", v.Load1, v.Load5, v.Load15)
	case v.CPUByPSI:
		fmt.Fprintf(w, "CPU gate: CPU pressure (PSI) %.0f%% (recent, counted while CPUs are free), threshold %.0f%%, deferring: %v, %s; load %.2f %.2f %.2f (not used)\n",
			v.CPUPressure, v.CPUPressureThreshold, v.LoadDeferred, bound, v.Load1, v.Load5, v.Load15)
	default:
		fmt.Fprintf(w, "CPU gate: 1-minute load average, less the threads of running batches; load %.2f %.2f %.2f, threshold %.2f, deferring: %v, %s\n",
			v.Load1, v.Load5, v.Load15, v.LoadThreshold, v.LoadDeferred, bound)
	}
	if v.PSI.Available {
		fmt.Fprintf(w, "PSI some avg10: cpu %.1f%%, io %.1f%% (threshold %.1f%%, deferring: %v), memory %.1f%%\n",
			v.PSI.CPU.SomeAvg10, v.PSI.IO.SomeAvg10, v.IOPressureThreshold, v.IODeferred, v.PSI.Memory.SomeAvg10)
	} else {
		fmt.Fprintln(w, "PSI: not available on this kernel")
	}
	fmt.Fprintf(w, "Swap: %s free of %s; zram: %s free of %s (never counted as memory)\n",
		humanBytes(v.SwapFree), humanBytes(v.SwapTotal), humanBytes(v.ZramFree), humanBytes(v.ZramTotal))
	printHolds(w, holds)
	if len(stale) > 0 {
		fmt.Fprintf(w, "\nManifests still showing a reservation from a stopped controller (released on its next start):\n")
		for _, s := range stale {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	return nil
}

func humanBytes(n int64) string { return governor.FormatBytes(n) }

// printGPUDevices says what nvidia-smi reports of each NVIDIA GPU beyond
// its budget: its utilization and the processes using it.
func printGPUDevices(w io.Writer, devs []probe.GPUDevice) {
	for i, d := range devs {
		if i == 0 {
			fmt.Fprintln(w, "\nNVIDIA GPUs (nvidia-smi):")
		}
		util := "utilization unknown"
		if d.Utilization >= 0 {
			util = fmt.Sprintf("utilization %d%%", d.Utilization)
		}
		procs := "no process"
		if len(d.Processes) > 0 {
			var parts []string
			for _, p := range d.Processes {
				used := "[N/A]"
				if p.Known {
					used = governor.FormatBytes(p.Bytes)
				}
				parts = append(parts, fmt.Sprintf("pid %d %s", p.PID, used))
			}
			procs = strings.Join(parts, ", ")
		}
		fmt.Fprintf(w, "  %s %s (%s): %s; %s\n", d.ID, d.Name, d.UUID, util, procs)
	}
}

// thresholdText is a pressure threshold for people ("off" when 0).
func thresholdText(n int64) string {
	if n <= 0 {
		return "off"
	}
	return humanBytes(n)
}
