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

// nvidiaSMIArgs is the query run on nvidia-smi; memory is in MiB.
var nvidiaSMIArgs = []string{"--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits"}

// parseNvidiaSMI parses the output of
// `nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader,nounits`.
// A bracketed value ("[N/A]", "[Not Supported]") in a memory column gives Known=false.
func parseNvidiaSMI(r io.Reader) ([]governor.GPU, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	cr.FieldsPerRecord = 4
	var out []governor.GPU
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
		g := governor.GPU{ID: "nvidia:" + rec[0], Name: rec[1]}
		total, okT, err := nvidiaMiB(rec[2])
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi gpu %s memory.total: %w", rec[0], err)
		}
		used, okU, err := nvidiaMiB(rec[3])
		if err != nil {
			return nil, fmt.Errorf("parse nvidia-smi gpu %s memory.used: %w", rec[0], err)
		}
		if okT && okU {
			g.Known = true
			g.TotalBytes = total
			g.FreeBytes = max(total-used, 0)
		}
		out = append(out, g)
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

// runNvidiaSMI runs the query and parses its output.
func runNvidiaSMI(ctx context.Context, path string, timeout time.Duration) ([]governor.GPU, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, nvidiaSMIArgs...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("run %s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	return parseNvidiaSMI(bytes.NewReader(out))
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
