package webview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// SeriesFile is the recorder's file in the machine's state directory
// (beside the learned history): the last hours of the machine's series,
// for a restarted controller.
const SeriesFile = "view-series.json"

// Defaults of a Recorder.
const (
	// DefaultInterval is how often the machine is sampled.
	DefaultInterval = 5 * time.Second
	// DefaultWindow is how far back the series go.
	DefaultWindow = 6 * time.Hour
	// DefaultSaveEvery is how often a changed series is saved.
	DefaultSaveEvery = time.Minute
)

// Budget is one budget at one instant, in its unit (bytes, threads or
// slots).
type Budget struct {
	Capacity int64 `json:"c"`
	Margin   int64 `json:"m,omitempty"`
	Reserved int64 `json:"r"`
}

// TaskUse is what one task held and used at one instant.
type TaskUse struct {
	// Task names the task (spool/name when several spools are served);
	// Spool is its spool's directory, for the view to tell whose it is
	// ("" in the points of OtherUsers, and of series saved before it was
	// kept).
	Task  string `json:"task"`
	Spool string `json:"spool,omitempty"`
	// Memory reserved by its contract and Used measured (bytes).
	Memory int64 `json:"mem,omitempty"`
	Used   int64 `json:"used,omitempty"`
	// Threads, GPU memory (bytes of dedicated VRAM), GPU and IO slots
	// reserved by its contract.
	Threads  int64 `json:"threads,omitempty"`
	GPUMem   int64 `json:"gpuMem,omitempty"`
	GPUSlots int64 `json:"gpuSlots,omitempty"`
	IOSlots  int64 `json:"io,omitempty"`
}

// Point is the machine at one instant.
type Point struct {
	// T is the instant, in Unix seconds.
	T int64 `json:"t"`
	// Memory (bytes), CPU (threads), GPU memory (bytes of dedicated
	// VRAM, every GPU's), GPU and IO slots: their capacity, margin and
	// the sum of the reservations.
	Memory   Budget `json:"mem"`
	CPU      Budget `json:"cpu"`
	GPUMem   Budget `json:"gpuMem"`
	GPUSlots Budget `json:"gpuSlots"`
	IOSlots  Budget `json:"io"`
	// MemoryUsed is the measured memory of the running batches.
	MemoryUsed int64 `json:"memUsed"`
	// Tasks are the tasks holding a contract or running a batch, by
	// name.
	Tasks []TaskUse `json:"tasks,omitempty"`
}

// Machine is what the recorder samples: the running host.
type Machine interface {
	Budgets() governor.BudgetsView
	Contracts() []reconcile.HeldContract
	RunningBatches() []reconcile.RunningBatch
	SpoolDirs() []string
}

// Recorder keeps the machine's series: a point every interval for the
// last window, in memory and in its file.
type Recorder struct {
	machine   Machine
	interval  time.Duration
	window    time.Duration
	saveEvery time.Duration
	path      string // "": memory only
	log       zerolog.Logger

	mu struct {
		sync.Mutex
		points []Point // oldest first, at most max
		dirty  bool    // points not saved yet
	}
}

// NewRecorder is a recorder of machine that samples it every interval
// (DefaultInterval when not positive) and keeps its series in path (""
// for memory only), for the default window, saved at the default pace.
func NewRecorder(machine Machine, path string, interval time.Duration, log zerolog.Logger) *Recorder {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Recorder{machine: machine, interval: interval, window: DefaultWindow,
		saveEvery: DefaultSaveEvery, path: path, log: log}
}

// max is how many points the window holds.
func (r *Recorder) max() int { return max(1, int(r.window/r.interval)) }

// Interval is how often the machine is sampled.
func (r *Recorder) Interval() time.Duration { return r.interval }

// Window is how far back the series go.
func (r *Recorder) Window() time.Duration { return r.window }

// Load reads the points a previous controller saved, keeping those of the
// window before now. A missing file is no points; an unreadable one is
// logged and ignored: the series is a convenience, never a reason not to
// start.
func (r *Recorder) Load(now time.Time) {
	if r.path == "" {
		return
	}
	data, err := os.ReadFile(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var saved []Point
	if err == nil {
		err = json.Unmarshal(data, &saved)
	}
	if err != nil {
		r.log.Warn().Err(err).Str("path", r.path).Msg("web view series not read; starting a new one")
		return
	}
	from := now.Add(-r.window).Unix()
	kept := saved[:0]
	for _, p := range saved {
		if p.T >= from && p.T <= now.Unix() {
			kept = append(kept, p)
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].T < kept[j].T })
	if n := len(kept) - r.max(); n > 0 {
		kept = kept[n:]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.points = append(kept, r.mu.points...)
	if n := len(r.mu.points) - r.max(); n > 0 {
		r.mu.points = r.mu.points[n:]
	}
}

// Sample adds the machine's point at now.
func (r *Recorder) Sample(now time.Time) {
	p := r.pointAt(now)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.mu.points); n >= r.max() {
		// Shift in place: the slice never grows past the window.
		copy(r.mu.points, r.mu.points[n-r.max()+1:])
		r.mu.points = r.mu.points[:r.max()-1]
	}
	r.mu.points = append(r.mu.points, p)
	r.mu.dirty = true
}

// pointAt reads the machine.
func (r *Recorder) pointAt(now time.Time) Point {
	v := r.machine.Budgets()
	p := Point{T: now.Unix(),
		Memory:   Budget{Capacity: v.Memory.Capacity, Margin: v.Memory.Margin, Reserved: v.Memory.Reserved},
		CPU:      Budget{Capacity: v.CPU.Capacity, Margin: v.CPU.Margin, Reserved: v.CPU.Reserved},
		GPUSlots: Budget{Capacity: v.GPUSlots.Capacity, Reserved: v.GPUSlots.Reserved},
		IOSlots:  Budget{Capacity: v.IOSlots.Capacity, Reserved: v.IOSlots.Reserved},
	}
	for _, g := range v.GPUs {
		p.GPUMem.Capacity += g.Memory.Capacity
		p.GPUMem.Margin += g.Memory.Margin
		p.GPUMem.Reserved += g.Memory.Reserved
	}
	held, running := r.machine.Contracts(), r.machine.RunningBatches()
	if len(held) == 0 && len(running) == 0 {
		return p
	}
	name := taskNamer(r.machine.SpoolDirs())
	byTask := make(map[string]*TaskUse)
	use := func(spool, task string) *TaskUse {
		k := name(spool, task)
		u := byTask[k]
		if u == nil {
			u = &TaskUse{Task: k, Spool: spool}
			byTask[k] = u
		}
		return u
	}
	for _, h := range held {
		u, c := use(h.Spool, h.Task), &h.Contract
		u.Memory += c.MemoryBytes
		u.Threads += int64(c.Threads)
		u.GPUMem += c.GPUMemoryBytes
		u.GPUSlots += int64(c.GPUSlots)
		u.IOSlots += int64(c.IOSlots)
	}
	for _, b := range running {
		use(b.Spool, b.Task).Used += b.MemoryBytes
		p.MemoryUsed += b.MemoryBytes
	}
	p.Tasks = make([]TaskUse, 0, len(byTask))
	for _, u := range byTask {
		p.Tasks = append(p.Tasks, *u)
	}
	sort.Slice(p.Tasks, func(i, j int) bool { return p.Tasks[i].Task < p.Tasks[j].Task })
	return p
}

// taskNamer names a task of one of spools: its name alone when one spool
// is served, else its spool's base name, a slash and its name.
func taskNamer(spools []string) func(spool, task string) string {
	if len(spools) <= 1 {
		return func(_, task string) string { return task }
	}
	return func(spool, task string) string { return filepath.Base(spool) + "/" + task }
}

// Since returns a copy of the points after t (Unix seconds), oldest first.
func (r *Recorder) Since(t int64) []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := sort.Search(len(r.mu.points), func(i int) bool { return r.mu.points[i].T > t })
	return append([]Point{}, r.mu.points[i:]...)
}

// Save writes the points to the recorder's file when they changed since
// the last save: a new file renamed over the old one, so that a crash
// leaves one or the other, never half of one.
func (r *Recorder) Save() error {
	if r.path == "" {
		return nil
	}
	r.mu.Lock()
	if !r.mu.dirty {
		r.mu.Unlock()
		return nil
	}
	data, err := json.Marshal(r.mu.points)
	r.mu.dirty = false
	r.mu.Unlock()
	if err != nil {
		return err
	}
	if err := reconcile.PublishFile(filepath.Dir(r.path), filepath.Base(r.path), data); err != nil {
		r.markDirty()
		return fmt.Errorf("web view series: %w", err)
	}
	return nil
}

// markDirty makes the next Save write again.
func (r *Recorder) markDirty() {
	r.mu.Lock()
	r.mu.dirty = true
	r.mu.Unlock()
}

// Run samples the machine every interval and saves the series every
// saveEvery, until ctx ends; it saves once more before it returns.
func (r *Recorder) Run(ctx context.Context) {
	r.Sample(time.Now())
	tick := time.NewTicker(r.interval)
	defer tick.Stop()
	saved := time.Now()
	failed := "" // the last save's error, logged once
	save := func() {
		err := r.Save()
		switch {
		case err != nil && err.Error() != failed:
			r.log.Warn().Err(err).Msg("web view series not saved; the view goes on, a restart starts a new series")
			failed = err.Error()
		case err == nil:
			failed = ""
		}
	}
	for {
		select {
		case <-ctx.Done():
			save()
			return
		case now := <-tick.C:
			r.Sample(now)
			if now.Sub(saved) >= r.saveEvery {
				saved = now
				save()
			}
		}
	}
}
