package runner

import (
	"fmt"
	"strings"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// GPUMemoryReader reports the GPU memory each process uses on one GPU, as
// last measured (the probe's nvidia-smi query of the compute processes).
// It must not block: a batch's supervising goroutine calls it at every
// sample.
type GPUMemoryReader interface {
	// ProcessGPUMemory returns the bytes each process uses on the GPU
	// gpuID ("nvidia:0") and when they were measured. An error means the
	// device is gone or its memory cannot be read: nothing is guessed.
	ProcessGPUMemory(gpuID string) (byPID map[int]int64, measured time.Time, err error)
}

// vramWatch holds a batch to its GPU memory contract: at each sample, when
// the reader has a newer measurement, the memory of the batch's processes
// on its GPU is summed; the highest sum is the peak, and a sum above the
// ceiling stops the batch.
type vramWatch struct {
	src      GPUMemoryReader
	gpu      string
	ceiling  int64
	measured time.Time
	// peak is the highest sum seen; read is false until one was.
	peak int64
	read bool
	// lastErr is the last error's text, logged once per change.
	lastErr string
}

// newVRAMWatch returns the watch of a batch, nil when it has no GPU memory
// contract or nothing measures it: the memory of each process is measured
// on NVIDIA GPUs only (nvidia-smi), not on a GPU the configuration
// declared or an AMD one.
func newVRAMWatch(s Spec) *vramWatch {
	if _, nvidia := nvidiaIndex(s.GPUID); s.GPUMemory == nil || !nvidia || s.GPUMemoryLimit <= 0 {
		return nil
	}
	return &vramWatch{src: s.GPUMemory, gpu: s.GPUID, ceiling: int64(float64(s.GPUMemoryLimit) * (1 + s.MemoryTolerance))}
}

// check sums the memory of pids on the GPU when a newer measurement is
// there. It returns the sum when it is above the ceiling (0 otherwise), and
// a note for the log when reading started or stopped failing ("" if none).
func (w *vramWatch) check(pids []int) (over int64, note string) {
	byPID, at, err := w.src.ProcessGPUMemory(w.gpu)
	if err != nil {
		if msg := err.Error(); msg != w.lastErr {
			w.lastErr = msg
			return 0, fmt.Sprintf("GPU memory on %s cannot be read (%v): the batch is not held to its GPU memory until it can be", w.gpu, err)
		}
		return 0, ""
	}
	if w.lastErr != "" {
		w.lastErr, note = "", fmt.Sprintf("GPU memory on %s can be read again", w.gpu)
	}
	if !at.After(w.measured) {
		return 0, note
	}
	w.measured = at
	var sum int64
	for _, pid := range pids {
		sum += byPID[pid]
	}
	w.peak, w.read = max(w.peak, sum), true
	if sum > w.ceiling {
		return sum, note
	}
	return 0, note
}

// peakBytes is the highest GPU memory seen; ok is false when none was
// read.
func (w *vramWatch) peakBytes() (peak int64, ok bool) {
	if w == nil {
		return 0, false
	}
	return w.peak, w.read
}

// gpuExceededMessage explains a GPU memory kill with numbers.
func gpuExceededMessage(s Spec, used int64) string {
	return fmt.Sprintf("GPU memory %s on %s exceeded the contract %s by more than %s",
		governor.FormatBytes(used), s.GPUID, governor.FormatBytes(s.GPUMemoryLimit), percent(s.MemoryTolerance))
}

// nvidiaIndex is the nvidia-smi index of an "nvidia:N" GPU id.
func nvidiaIndex(id string) (string, bool) {
	n, ok := strings.CutPrefix(id, "nvidia:")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return "", false
	}
	return n, true
}

// setGPUEnv makes the batch see only the NVIDIA GPU its contract reserved
// memory on: CUDA_VISIBLE_DEVICES is its index in PCI order, the order of
// nvidia-smi's indexes, which CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's
// too (its default puts the fastest device first).
func setGPUEnv(e *environment, gpuID string) {
	if n, ok := nvidiaIndex(gpuID); ok {
		e.set("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
		e.set("CUDA_VISIBLE_DEVICES", n)
	}
}
