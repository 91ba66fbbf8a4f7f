package webview

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/history"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// fakeHost is a resource snapshot: what a host would answer, set by the
// test.
type fakeHost struct {
	mu       sync.Mutex
	budgets  governor.BudgetsView
	held     []reconcile.HeldContract
	running  []reconcile.RunningBatch
	tasks    []reconcile.TaskView
	finished []reconcile.BatchRow
	spools   []string
}

func (f *fakeHost) Budgets() governor.BudgetsView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.budgets
}

func (f *fakeHost) Contracts() []reconcile.HeldContract {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]reconcile.HeldContract(nil), f.held...)
}

func (f *fakeHost) RunningBatches() []reconcile.RunningBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]reconcile.RunningBatch(nil), f.running...)
}
func (f *fakeHost) SpoolDirs() []string         { return f.spools }
func (f *fakeHost) Tasks() []reconcile.TaskView { return f.tasks }
func (f *fakeHost) FinishedBatches(int) []reconcile.BatchRow {
	return f.finished
}
func (f *fakeHost) Estimate(p string) reconcile.ProfileEstimate {
	return reconcile.ProfileEstimate{Profile: p}
}
func (f *fakeHost) Records(string) []history.Record { return nil }

const gib = 1 << 30

// The per-task stacks of a point add up to the governor's reservations,
// and the recorder keeps only its window.
func TestRecorderKeepsTheWindowAndStacksPerTask(t *testing.T) {
	h := &fakeHost{spools: []string{"/s"}}
	h.budgets.Memory = governor.BudgetState{Capacity: 8 * gib, Margin: gib, Reserved: 3 * gib}
	h.held = []reconcile.HeldContract{
		{Spool: "/s", Task: "b", Contract: governor.Contract{MemoryBytes: 2 * gib, Threads: 2}},
		{Spool: "/s", Task: "a", Contract: governor.Contract{MemoryBytes: gib, Threads: 1, IOSlots: 1}},
	}
	h.running = []reconcile.RunningBatch{{Spool: "/s", Task: "a", MemoryBytes: 300 << 20}}
	r := NewRecorder(h, "", time.Second, zerolog.Nop())
	r.window = 10 * time.Second
	t0 := time.Unix(1_000_000, 0)
	for i := range 25 {
		r.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	all := r.Since(0)
	if len(all) != 10 || all[0].T != t0.Unix()+15 || all[9].T != t0.Unix()+24 {
		t.Fatalf("kept %d points from %d: want the last 10", len(all), all[0].T-t0.Unix())
	}
	p := all[9]
	if len(p.Tasks) != 2 || p.Tasks[0].Task != "a" || p.Tasks[1].Task != "b" {
		t.Fatalf("tasks %+v: want a then b", p.Tasks)
	}
	var sum int64
	for _, u := range p.Tasks {
		sum += u.Memory
	}
	if sum != p.Memory.Reserved || p.MemoryUsed != 300<<20 || p.Tasks[0].Used != 300<<20 || p.Tasks[0].IOSlots != 1 {
		t.Fatalf("point %+v: the stacks must add up to the reservations", p)
	}
	if got := r.Since(t0.Unix() + 22); len(got) != 2 {
		t.Fatalf("since +22: %d points, want 2", len(got))
	}
}

// A restarted controller keeps the last hours: the series is saved whole
// (never half a file), read back, and what is older than the window, from
// the future, or unreadable is dropped, never fatal.
func TestRecorderSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SeriesFile)
	h := &fakeHost{spools: []string{"/s"}}
	h.budgets.Memory = governor.BudgetState{Capacity: 8 * gib}
	now := time.Now()
	r := NewRecorder(h, path, time.Minute, zerolog.Nop())
	for i := 10; i > 0; i-- {
		r.Sample(now.Add(-time.Duration(i) * time.Hour / 2)) // 5 h ago to 30 min ago
	}
	if err := r.Save(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("state directory holds %v: want the series file alone", entries)
	}
	again := NewRecorder(h, path, time.Minute, zerolog.Nop())
	again.window = 3 * time.Hour
	again.Load(now)
	if got := again.Since(0); len(got) != 6 || got[0].T < now.Add(-3*time.Hour).Unix() {
		t.Fatalf("after a restart: %d points, want the 6 of the last 3 hours", len(got))
	}
	// Nothing new: no write.
	st1, _ := os.Stat(path)
	if err := again.Save(); err != nil {
		t.Fatal(err)
	}
	if st2, _ := os.Stat(path); !st2.ModTime().Equal(st1.ModTime()) {
		t.Error("an unchanged series was written again")
	}
	for _, bad := range []string{"", "{", "[{\"t\": \"x\"}]", strings.Repeat("[", 10000)} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		r := NewRecorder(h, path, time.Minute, zerolog.Nop())
		r.Load(now)
		r.Sample(now)
		if got := r.Since(0); len(got) != 1 {
			t.Fatalf("after a bad file %q: %d points", bad[:min(len(bad), 10)], len(got))
		}
	}
}

// Many readers and the sampler at once: every answer is a consistent,
// ordered copy (run under -race).
func TestRecorderConcurrentReaders(t *testing.T) {
	h := &fakeHost{spools: []string{"/s"}}
	r := NewRecorder(h, filepath.Join(t.TempDir(), SeriesFile), time.Second, zerolog.Nop())
	r.window = 50 * time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				pts := r.Since(0)
				for i := 1; i < len(pts); i++ {
					if pts[i].T <= pts[i-1].T {
						t.Errorf("points out of order at %d", i)
						return
					}
				}
				if len(pts) > 50 {
					t.Errorf("%d points: past the window", len(pts))
					return
				}
				_ = r.Save()
			}
		}()
	}
	t0 := time.Unix(2_000_000, 0)
	for i := range 500 {
		h.mu.Lock()
		h.held = []reconcile.HeldContract{{Spool: "/s", Task: fmt.Sprint("t", rng.IntN(5)), Contract: governor.Contract{MemoryBytes: rng.Int64N(gib)}}}
		h.mu.Unlock()
		r.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	close(stop)
	wg.Wait()
}

func newTestView(h *fakeHost) *View {
	return New(h, NewRecorder(h, "", time.Second, zerolog.Nop()))
}

// The view is read-only, answers only a Host naming this machine, and
// its JSON lists are lists even when empty (the pages read .length).
func TestViewIsReadOnlyAndLocal(t *testing.T) {
	v := newTestView(&fakeHost{spools: []string{"/s"}})
	srv := httptest.NewServer(As(Viewer{All: true}, v))
	defer srv.Close()
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, _ := http.NewRequest(m, srv.URL+"/api/tasks", strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d, want 405", m, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/tasks", nil)
	req.Host = "attacker.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a rebound host name: %d, want 403", resp.StatusCode)
	}
	for _, path := range []string{"/api/tasks", "/api/batches", "/api/machine"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for k, val := range m {
			if val == nil {
				t.Errorf("%s: %s is null, want a list", path, k)
			}
		}
	}
	for path, want := range map[string]int{"/": 200, "/timeline": 200, "/graph": 200, "/task/x": 200, "/static/app.js": 200,
		"/static/vendor/uPlot.iife.min.js": 200, "/api/tasks/nope": 404, "/nope": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
	}
	for host, want := range map[string]bool{"127.0.0.1:9465": true, "[::1]:9465": true, "localhost:1": true, "a.localhost": true,
		"10.1.2.3": true, "evil.com": false, "localhost.evil.com": false, hostname(t) + ".evil.com": false, hostname(t): true} {
		if got := allowedHost(host); got != want {
			t.Errorf("allowedHost(%q) = %v", host, got)
		}
	}
}

// A log's end is read only from a regular file: a FIFO or a link put in
// its place is not opened (a FIFO would hang the handler), and the tail
// starts at a line.
func TestTailOfReadsOnlyARegularFile(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "t.log")
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(log, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := tailOf(log, 100)
	if !strings.HasPrefix(got, "line ") || !strings.HasSuffix(got, "line 999\n") || len(got) > 100 {
		t.Fatalf("tail %q", got)
	}
	fifo := filepath.Join(dir, "fifo.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() { done <- tailOf(fifo, 100) }()
	select {
	case s := <-done:
		if s != "" {
			t.Errorf("a FIFO read as %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reading a FIFO hung")
	}
	link := filepath.Join(dir, "link.log")
	if err := os.Symlink(log, link); err != nil {
		t.Fatal(err)
	}
	if s := tailOf(link, 100); s != "" {
		t.Errorf("a symlink followed: %q", s)
	}
}

// Outcomes: a memory kill (or a GPU memory kill), a plain exit, a failure.
func TestOutcomeOf(t *testing.T) {
	for _, c := range []struct {
		row  reconcile.BatchRow
		want string
	}{
		{reconcile.BatchRow{ExitCode: 0}, OutcomeSucceeded},
		{reconcile.BatchRow{ExitCode: -1, KilledForMemory: true}, OutcomeMemory},
		{reconcile.BatchRow{ExitCode: -1, Reason: "MemoryExceeded"}, OutcomeMemory},
		{reconcile.BatchRow{ExitCode: -1, Reason: "GPUMemoryExceeded"}, OutcomeMemory},
		{reconcile.BatchRow{ExitCode: 3}, OutcomeFailed},
		{reconcile.BatchRow{ExitCode: -1, Reason: "Evicted"}, OutcomeEvicted},
		{reconcile.BatchRow{ExitCode: -1, Reason: "BatchTimeout"}, OutcomeFailed},
	} {
		if got := outcomeOf(&c.row); got != c.want {
			t.Errorf("%+v: %s, want %s", c.row, got, c.want)
		}
	}
}

// /api/tasks answers at most its limit: the tasks not ended first, in
// arrival order, then the latest ended; the counts cover them all.
func TestTasksLimitKeepsTheTasksNotEnded(t *testing.T) {
	h := &fakeHost{spools: []string{"/s"}}
	for i := range 10 {
		phase := v1alpha1.PhaseDone
		if i%4 == 1 {
			phase = v1alpha1.PhaseRunning
		}
		h.tasks = append(h.tasks, reconcile.TaskView{Spool: "/s", File: fmt.Sprintf("t%d.yaml", i),
			Row: listing.Row{Name: fmt.Sprintf("t%d", i), Phase: phase, Seq: int64(i + 1)}})
	}
	h.tasks = append(h.tasks, reconcile.TaskView{Spool: "/s", File: "new.yaml", Row: listing.Row{Name: "new"}})
	srv := httptest.NewServer(As(Viewer{All: true}, newTestView(h)))
	defer srv.Close()
	var a TasksAnswer
	resp, err := http.Get(srv.URL + "/api/tasks?limit=5")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range a.Tasks {
		names = append(names, s.Name+":"+s.Phase)
	}
	if want := "new:New t1:Running t5:Running t9:Running t8:Done"; strings.Join(names, " ") != want {
		t.Errorf("tasks %v, want %s", names, want)
	}
	if a.Total != 11 || a.Phases["Done"] != 7 || a.Phases["Running"] != 3 || a.Phases["New"] != 1 {
		t.Errorf("total %d, phases %v", a.Total, a.Phases)
	}
	for _, bad := range []string{"-1", "x"} {
		resp, err := http.Get(srv.URL + "/api/tasks?limit=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("limit=%s: %d, want 400", bad, resp.StatusCode)
		}
	}
}

// With two spools, a task of each is named spool/name everywhere, and its
// page finds it, with the batches the history keeps of its name.
func TestTwoSpoolsNameTasksBySpool(t *testing.T) {
	h := &fakeHost{spools: []string{"/srv/a", "/srv/b"}}
	h.tasks = []reconcile.TaskView{
		{Spool: "/srv/a", File: "x.yaml", Row: listing.Row{Name: "x", Phase: v1alpha1.PhaseDone}},
		{Spool: "/srv/b", File: "x.yaml", Row: listing.Row{Name: "x", Phase: v1alpha1.PhaseRunning}},
	}
	h.held = []reconcile.HeldContract{{Spool: "/srv/b", Task: "x", Contract: governor.Contract{MemoryBytes: gib}}}
	h.running = []reconcile.RunningBatch{{Spool: "/srv/b", Task: "x", Index: 1, Attempt: 1, Size: 2}}
	h.finished = []reconcile.BatchRow{{Task: "x", Batch: 0, Attempt: 1, Items: 2}}
	v := newTestView(h)
	v.rec.Sample(time.Unix(1, 0))
	if p := v.rec.Since(0); len(p) != 1 || len(p[0].Tasks) != 1 || p[0].Tasks[0].Task != "b/x" {
		t.Fatalf("series %+v: want b/x", p)
	}
	srv := httptest.NewServer(As(Viewer{All: true}, v))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/tasks/b/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a TaskAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	if a.Task.Name != "b/x" || a.Task.Phase != "Running" || len(a.Batches) != 2 || a.Batches[1].Outcome != OutcomeRunning {
		t.Errorf("b/x's page: %+v", a)
	}
}

// hostname is the machine's host name.
func hostname(t *testing.T) string {
	t.Helper()
	name, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return name
}
