package probe

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// noteGPUMemory records a refresh of the NVIDIA GPUs for ProcessGPUMemory:
// the devices and their processes on success (appsErr: the processes
// could not be read), err on failure (the devices last seen are kept, for
// GPUDevices; ProcessGPUMemory reads none of them until a success).
// REQUIRES: p.mu held.
func (p *Prober) noteGPUMemory(now time.Time, devs []GPUDevice, appsErr, err error) {
	p.gpuMem.Lock()
	defer p.gpuMem.Unlock()
	p.gpuMem.at, p.gpuMem.valid, p.gpuMem.err = now, true, err
	if err == nil {
		p.gpuMem.devices, p.gpuMem.appsErr = devs, appsErr
	}
}

// ProcessGPUMemory returns the device memory (bytes) each process uses on
// the GPU gpuID ("nvidia:0"), as last measured, and when it was measured
// (when that refresh began). The map is the caller's own copy. It never
// waits for nvidia-smi: when the measurement is older than
// Options.GPUPeriod it starts one refresh in the background (at most one
// at a time) and answers from the last one. Errors, never a guess:
// ErrGPUGone when the last measurement does not have the GPU;
// ErrGPUMemoryUnreadable when it failed, when the GPU's memory or that of
// a process on it was "[N/A]", when the processes could not be listed,
// and before any measurement.
func (p *Prober) ProcessGPUMemory(gpuID string) (byPID map[int]int64, measured time.Time, err error) {
	now := p.opts.Clock.Now()
	p.gpuMem.Lock()
	defer p.gpuMem.Unlock()
	g := &p.gpuMem
	if p.nvidia != "" && !g.refreshing && (!g.valid || now.Sub(g.at) >= p.opts.GPUPeriod || now.Before(g.at)) {
		g.refreshing = true
		go p.refreshGPUs()
	}
	if !strings.HasPrefix(gpuID, "nvidia:") {
		return nil, time.Time{}, fmt.Errorf("%s: %w: the memory of each process is measured on NVIDIA GPUs only", gpuID, ErrGPUMemoryUnreadable)
	}
	switch {
	case g.valid && g.err != nil:
		return nil, time.Time{}, fmt.Errorf("%s: %w: %v", gpuID, ErrGPUMemoryUnreadable, g.err)
	case !g.valid:
		return nil, time.Time{}, fmt.Errorf("%s: %w: not measured yet", gpuID, ErrGPUMemoryUnreadable)
	}
	i := slices.IndexFunc(g.devices, func(d GPUDevice) bool { return d.ID == gpuID })
	if i < 0 {
		return nil, time.Time{}, fmt.Errorf("%s: %w: nvidia-smi did not list it at %s", gpuID, ErrGPUGone, g.at.Format(time.RFC3339))
	}
	d := g.devices[i]
	switch {
	case !d.Known:
		return nil, time.Time{}, fmt.Errorf("%s: %w: nvidia-smi reports its memory as not available", gpuID, ErrGPUMemoryUnreadable)
	case g.appsErr != nil:
		return nil, time.Time{}, fmt.Errorf("%s: %w: its processes: %v", gpuID, ErrGPUMemoryUnreadable, g.appsErr)
	}
	byPID = make(map[int]int64, len(d.Processes))
	for _, proc := range d.Processes {
		if !proc.Known {
			return nil, time.Time{}, fmt.Errorf("%s: %w: nvidia-smi reports the memory of pid %d as not available", gpuID, ErrGPUMemoryUnreadable, proc.PID)
		}
		byPID[proc.PID] += proc.Bytes
	}
	return byPID, g.at, nil
}

// refreshGPUs measures the GPUs again when the last measurement is older
// than GPUPeriod (another caller may have measured them meanwhile).
func (p *Prober) refreshGPUs() {
	p.mu.Lock()
	p.lockedGPUs(p.opts.Clock.Now())
	p.mu.Unlock()
	p.gpuMem.Lock()
	p.gpuMem.refreshing = false
	p.gpuMem.Unlock()
}

// GPUDevices returns the NVIDIA GPUs of the last successful measurement,
// with their utilization and processes (nil before any).
func (p *Prober) GPUDevices() []GPUDevice {
	p.gpuMem.Lock()
	defer p.gpuMem.Unlock()
	out := slices.Clone(p.gpuMem.devices)
	for i := range out {
		out[i].Processes = slices.Clone(out[i].Processes)
	}
	return out
}
