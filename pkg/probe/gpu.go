package probe

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

const mib = int64(1) << 20

// apuVRAMThreshold: an amdgpu device with at most this much VRAM and a GTT
// domain is taken for an APU sharing system RAM (see doc.go).
const apuVRAMThreshold = 512 * mib

// nvidiaSMIArgs is the device query run on nvidia-smi; memory is in MiB,
// utilization in percent.
var nvidiaSMIArgs = []string{"--query-gpu=index,uuid,name,memory.total,memory.used,memory.free,utilization.gpu", "--format=csv,noheader,nounits"}

// nvidiaAppsArgs is the query of the processes using each GPU (compute
// contexts); memory is in MiB.
var nvidiaAppsArgs = []string{"--query-compute-apps=gpu_uuid,pid,used_gpu_memory", "--format=csv,noheader,nounits"}

// GPUDevice is one NVIDIA GPU as nvidia-smi last reported it.
type GPUDevice struct {
	// ID ("nvidia:INDEX"), UUID and Name of the device.
	ID, UUID, Name string
	// Known is false when a memory column was not available ("[N/A]");
	// the bytes are then 0.
	Known bool
	// TotalBytes, UsedBytes and FreeBytes of its memory.
	TotalBytes, UsedBytes, FreeBytes int64
	// Utilization is the percentage of time a kernel ran over the last
	// sample period, -1 when not available.
	Utilization int
	// Processes are those with a compute context on it.
	Processes []GPUProcess
}

// GPUProcess is one process using a GPU.
type GPUProcess struct {
	// PID as the driver reports it (the host's pid namespace).
	PID int
	// Bytes of GPU memory it uses; Known is false when the driver does
	// not say ("[N/A]").
	Bytes int64
	Known bool
}

// parseNvidiaSMI parses the output of the device query (nvidiaSMIArgs).
// A bracketed value ("[N/A]", "[Not Supported]") in a memory column gives
// Known=false; in utilization.gpu, -1.
func parseNvidiaSMI(r io.Reader) ([]GPUDevice, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	cr.FieldsPerRecord = 7
	var out []GPUDevice
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi output: %w", err)
		}
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		if _, err := strconv.ParseUint(rec[0], 10, 16); err != nil {
			return nil, fmt.Errorf("parse nvidia-smi gpu index %q: want a number", rec[0])
		}
		d := GPUDevice{ID: "nvidia:" + rec[0], UUID: rec[1], Name: rec[2], Utilization: -1}
		var ok [3]bool
		var v [3]int64
		for i, col := range []string{"memory.total", "memory.used", "memory.free"} {
			if v[i], ok[i], err = nvidiaMiB(rec[3+i]); err != nil {
				return nil, fmt.Errorf("parse nvidia-smi gpu %s %s: %w", rec[0], col, err)
			}
		}
		if ok[0] && ok[1] {
			d.Known, d.TotalBytes, d.UsedBytes = true, v[0], v[1]
			d.FreeBytes = max(v[0]-v[1], 0)
			if ok[2] {
				d.FreeBytes = min(v[2], v[0])
			}
		}
		if u, err := strconv.Atoi(rec[6]); err == nil && u >= 0 && u <= 100 {
			d.Utilization = u
		}
		out = append(out, d)
	}
}

// budgetGPU is the governor's view of a device.
func (d GPUDevice) budgetGPU() governor.GPU {
	return governor.GPU{ID: d.ID, Name: d.Name, Known: d.Known, TotalBytes: d.TotalBytes, FreeBytes: d.FreeBytes}
}

// nvidiaApp is one line of the compute processes query.
type nvidiaApp struct {
	uuid string
	GPUProcess
}

// parseNvidiaApps parses the output of the compute processes query
// (nvidiaAppsArgs). An empty output, or the line some drivers print
// instead ("No running processes found"), is no process.
func parseNvidiaApps(r io.Reader) ([]nvidiaApp, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	cr.FieldsPerRecord = -1
	var out []nvidiaApp
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi compute apps: %w", err)
		}
		if len(rec) == 1 && strings.HasPrefix(strings.TrimSpace(rec[0]), "No running") {
			continue
		}
		if len(rec) != 3 {
			return nil, fmt.Errorf("parse nvidia-smi compute apps: %d fields, want 3", len(rec))
		}
		for i := range rec {
			rec[i] = strings.TrimSpace(rec[i])
		}
		pid, err := strconv.Atoi(rec[1])
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("parse nvidia-smi compute apps: pid %q", rec[1])
		}
		b, known, err := nvidiaMiB(rec[2])
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi compute apps: pid %d used_gpu_memory: %w", pid, err)
		}
		out = append(out, nvidiaApp{uuid: rec[0], GPUProcess: GPUProcess{PID: pid, Bytes: b, Known: known}})
	}
}

// nvidiaMiB parses a MiB value; ok is false for bracketed "not available" values.
func nvidiaMiB(s string) (bytes int64, ok bool, err error) {
	if strings.HasPrefix(s, "[") {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("value %q: %w", s, err)
	}
	if v < 0 || v > (1<<63-1)/mib {
		return 0, false, fmt.Errorf("value %q out of range", s)
	}
	return v * mib, true, nil
}

// runNvidiaSMI runs the device query, then the compute processes query,
// and returns the devices with their processes. When only the second
// fails, the devices are returned with appsErr: the budgets can be
// measured, the processes' memory cannot. A process on a device missing
// from the first answer (one that appeared in between) is left out.
func runNvidiaSMI(ctx context.Context, path string, timeout time.Duration) (devs []GPUDevice, appsErr, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := runTool(ctx, path, nvidiaSMIArgs)
	if err != nil {
		return nil, nil, err
	}
	if devs, err = parseNvidiaSMI(bytes.NewReader(out)); err != nil {
		return nil, nil, err
	}
	out, appsErr = runTool(ctx, path, nvidiaAppsArgs)
	if appsErr != nil {
		return devs, appsErr, nil
	}
	apps, appsErr := parseNvidiaApps(bytes.NewReader(out))
	if appsErr != nil {
		return devs, appsErr, nil
	}
	for _, a := range apps {
		for i := range devs {
			if devs[i].UUID == a.uuid {
				devs[i].Processes = append(devs[i].Processes, a.GPUProcess)
			}
		}
	}
	return devs, nil, nil
}

// runTool runs path with args and returns its standard output.
func runTool(ctx context.Context, path string, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run %s %s: %w: %s", path, args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

var (
	drmCard    = regexp.MustCompile(`^card[0-9]+$`)
	pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
)

// nvidiaBound lists the PCI devices bound to the nvidia kernel driver, as
// GPUs present but unmeasurable (Known=false). It stands in when nvidia-smi
// is absent, so that the governor answers WAIT ("GPU unknown") rather than
// REJECT ("no GPU"). IDs follow PCI order, as nvidia-smi's indexes do.
func nvidiaBound(sysRoot string) []governor.GPU {
	ents, err := os.ReadDir(filepath.Join(sysRoot, "bus", "pci", "drivers", "nvidia"))
	if err != nil {
		return nil
	}
	var out []governor.GPU
	for _, e := range ents { // ReadDir sorts by name: PCI order
		if pciAddress.MatchString(e.Name()) {
			out = append(out, governor.GPU{
				ID:   "nvidia:" + strconv.Itoa(len(out)),
				Name: "NVIDIA GPU " + e.Name(),
			})
		}
	}
	return out
}

// amdGPUs lists amdgpu devices under sysRoot/class/drm/card*/device.
func amdGPUs(sysRoot string) []governor.GPU {
	drm := filepath.Join(sysRoot, "class", "drm")
	ents, err := os.ReadDir(drm)
	if err != nil {
		return nil
	}
	var out []governor.GPU
	for _, e := range ents {
		if !drmCard.MatchString(e.Name()) {
			continue
		}
		dev := filepath.Join(drm, e.Name(), "device")
		vramTotal, errT := readSysBytes(filepath.Join(dev, "mem_info_vram_total"))
		if errors.Is(errT, os.ErrNotExist) {
			continue // not an amdgpu device
		}
		g := governor.GPU{ID: "amdgpu:" + e.Name(), Name: "AMD GPU " + e.Name()}
		if real, err := filepath.EvalSymlinks(dev); err == nil {
			g.ID = "amdgpu:" + filepath.Base(real)
		}
		if b, err := os.ReadFile(filepath.Join(dev, "product_name")); err == nil && len(bytes.TrimSpace(b)) > 0 {
			g.Name = string(bytes.TrimSpace(b))
		}
		vramUsed, errU := readSysBytes(filepath.Join(dev, "mem_info_vram_used"))
		if errT == nil && errU == nil {
			g.Known, g.TotalBytes, g.FreeBytes = true, vramTotal, max(vramTotal-vramUsed, 0)
		}
		if errT == nil && vramTotal <= apuVRAMThreshold {
			gttTotal, errGT := readSysBytes(filepath.Join(dev, "mem_info_gtt_total"))
			if errGT == nil {
				g.Unified = true
				gttUsed, errGU := readSysBytes(filepath.Join(dev, "mem_info_gtt_used"))
				g.Known = errGU == nil
				g.TotalBytes, g.FreeBytes = gttTotal, max(gttTotal-gttUsed, 0)
				if !g.Known {
					g.FreeBytes = 0
				}
			}
		}
		if !g.Known {
			g.TotalBytes, g.FreeBytes = 0, 0
		}
		out = append(out, g)
	}
	return out
}

// parseSysBytes parses a sysfs file holding one unsigned byte count.
func parseSysBytes(r io.Reader) (int64, error) {
	s, err := readTrimmed(r)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("parse byte count %q: want a non-negative integer", s)
	}
	return v, nil
}

func readSysBytes(path string) (int64, error) {
	return readFileWith(path, parseSysBytes)
}
