package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/webview"
	"github.com/lardon3d/lardon3d-controller/pkg/webview/browsertest"
)

// webviewPipeline is a photogrammetry-like pipeline: extract, then match
// (declared at 0.7× its need: its first batch is killed for memory and
// retried), then mesh, whose log holds markup that must show as text.
const webviewPipeline = `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: extract}
spec:
  command: [lardon3d-synth, --fixed, 64Mi, --per-item, 16Mi, --cpu-per-item, 10ms, --hold, 1500ms]
  items: {count: 8}
  resources: {fixed: {memory: 80Mi}, perItem: {memory: 20Mi}, batch: {max: 4}}
---
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: match}
spec:
  dependsOn: [extract]
  command: [lardon3d-synth, --fixed, 96Mi, --per-item, 24Mi, --cpu-per-item, 10ms, --hold, 1500ms]
  items: {count: 8}
  resources: {fixed: {memory: 67Mi}, perItem: {memory: 17Mi}, batch: {max: 4}, profile: match-synth}
---
apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: mesh}
spec:
  dependsOn: [match]
  command: [sh, -c, 'echo "<script>document.title=1</script><img src=x onerror=alert(1)>"; while [ ! -e %s ]; do sleep 0.1; done']
  items: {count: 2}
`

// artifactDir is where the browser tests save their screenshots:
// $LARDON3D_ARTIFACTS, else a directory under the system's temporary one
// that outlives the test (CI keeps it as an artifact).
func artifactDir(t *testing.T, name string) string {
	t.Helper()
	base := os.Getenv("LARDON3D_ARTIFACTS")
	if base == "" {
		base = filepath.Join(os.TempDir(), "lardon3d-artifacts")
	}
	dir := filepath.Join(base, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// timelineBar is one batch as the timeline draws it.
type timelineBar struct {
	Task                        string
	Generation, Batch, Attempts int64
	Outcome                     string
	Retry                       bool
}

// The web view, in a real browser, of a real controller running a
// pipeline with a memory kill and a retry: every page loads without an
// error, the timeline shows every batch the history holds with its
// outcome, the memory chart's stacked reservations never exceed the
// capacity, the graph shows the dependencies, a task's page its
// conditions, batches, samples and log (as text). Screenshots of each
// page are saved (artifactDir).
func TestWebViewInABrowser(t *testing.T) {
	spool := newSpool(t)
	gate := filepath.Join(t.TempDir(), "mesh-may-end")
	for i, doc := range strings.Split(fmt.Sprintf(webviewPipeline, gate), "---\n") {
		name := []string{"extract", "match", "mesh"}[i]
		writeManifest(t, spool, name+".yaml", doc)
	}
	c := startController(t, spool, "--metrics-addr", "127.0.0.1:0", "--view-interval", "200ms", "--memory-capacity", "2Gi")
	base := "http://" + metricsAddr(t, c)
	token := viewToken(t, spool)
	shots := artifactDir(t, "webview")
	b := browsertest.Start(t)

	// Live: while mesh runs, the timeline and the graph show it running;
	// once it ends, the same pages, never reloaded, show it ended. The
	// first visit brings the token: the pages after it have its cookie.
	live := b.Open(t, base+"/timeline?token="+token)
	live.WaitFor(t, `document.querySelector('rect.batch.Running[data-task="mesh"]') !== null`, 3*time.Minute)
	graph := b.Open(t, base+"/graph")
	graph.WaitFor(t, `document.querySelector('.node[data-task="mesh"][data-phase="Running"]') !== null`, 30*time.Second)
	graph.WaitFor(t, `document.querySelector('.node[data-task="extract"][data-phase="Done"]') !== null`, 30*time.Second)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	live.WaitFor(t, `document.querySelectorAll('rect.batch[data-task="mesh"][data-outcome="Succeeded"]').length === 2 && document.querySelector("rect.batch.Running") === null`, time.Minute)
	graph.WaitFor(t, `document.querySelector('.node[data-task="mesh"][data-phase="Done"]') !== null`, 30*time.Second)
	checkNoErrors(t, "/timeline (live)", live)
	checkNoErrors(t, "/graph (live)", graph)

	eventually(t, 3*time.Minute, "every task Done", func() bool {
		for _, n := range []string{"extract", "match", "mesh"} {
			task, err := v1alpha1.ParseManifest(n+".yaml", mustRead(t, filepath.Join(spool, n+".yaml")))
			if err != nil || task.Status.Phase != v1alpha1.PhaseDone {
				return false
			}
		}
		return true
	})
	// What the history holds: the batches the timeline must show.
	var history struct {
		Batches []struct {
			Task              string
			Generation, Batch int64
			Attempt           int64
			Outcome, Reason   string
			End               float64
		}
	}
	eventually(t, 30*time.Second, "every batch in the history", func() bool {
		history.Batches = nil
		getJSON(t, token, base+"/api/batches", &history)
		n := 0
		for _, b := range history.Batches {
			if b.End > 0 && b.Task == "mesh" {
				n++
			}
		}
		return n == 2 // mesh's two items, in one or two batches: both ended
	})
	var want []timelineBar
	kills, retries := 0, 0
	for _, b := range history.Batches {
		want = append(want, timelineBar{Task: b.Task, Generation: b.Generation, Batch: b.Batch, Attempts: b.Attempt, Outcome: b.Outcome, Retry: b.Attempt > 1})
		if b.Outcome == "MemoryExceeded" {
			kills++
		}
		if b.Attempt > 1 {
			retries++
		}
	}
	if kills == 0 || retries == 0 {
		t.Fatalf("the pipeline had %d memory kills and %d retries: the test needs both (history %+v)", kills, retries, history.Batches)
	}
	// The profile's measures (the store is the running controller's).
	var match struct{ Samples []json.RawMessage }
	getJSON(t, token, base+"/api/tasks/match", &match)
	if n := len(match.Samples); n < 3 {
		t.Fatalf("match's profile holds %d batches, want its kill, its retry and its second batch", n)
	}

	// The machine over time.
	p := b.Open(t, base+"/")
	p.WaitFor(t, `window.lardonView && window.lardonView.charts.memory && window.lardonView.updates > 0`, 30*time.Second)
	var mem struct {
		Top, Capacity []float64
		Names         []string
	}
	p.Eval(t, `(() => { const c = window.lardonView.charts.memory; return {top: Array.from(c.top), capacity: Array.from(c.lines["capacity"]), names: c.names}; })()`, &mem)
	if len(mem.Top) == 0 || len(mem.Top) != len(mem.Capacity) {
		t.Fatalf("memory chart: %d stacked points, %d capacity points", len(mem.Top), len(mem.Capacity))
	}
	peak := 0.0
	for i := range mem.Top {
		if mem.Top[i] > mem.Capacity[i] {
			t.Errorf("point %d: reservations stacked to %.0f bytes, above the capacity %.0f", i, mem.Top[i], mem.Capacity[i])
		}
		peak = max(peak, mem.Top[i])
	}
	if peak == 0 || !slices.Contains(mem.Names, "match") {
		t.Errorf("the memory chart never stacked a reservation of match (tasks %v, highest stack %.0f): the check above proves nothing", mem.Names, peak)
	}
	p.Screenshot(t, filepath.Join(shots, "machine.png"))
	checkNoErrors(t, "/", p)

	// The timeline: every batch of the history, with its outcome.
	p = b.Open(t, base+"/timeline")
	p.WaitFor(t, `document.querySelectorAll("rect.batch").length > 0`, 30*time.Second)
	var bars []timelineBar
	p.Eval(t, `Array.from(document.querySelectorAll("rect.batch")).map(r => ({Task: r.dataset.task, Generation: +r.dataset.generation,
		Batch: +r.dataset.batch, Attempts: +r.dataset.attempt, Outcome: r.dataset.outcome, Retry: r.classList.contains("retry")}))`, &bars)
	key := func(x timelineBar) string {
		return fmt.Sprintf("%s/%d/%d/%d", x.Task, x.Generation, x.Batch, x.Attempts)
	}
	drawn := map[string]timelineBar{}
	for _, x := range bars {
		drawn[key(x)] = x
	}
	for _, w := range want {
		got, ok := drawn[key(w)]
		if !ok {
			t.Errorf("batch %s is not on the timeline", key(w))
			continue
		}
		if got != w {
			t.Errorf("batch %s drawn as %+v, want %+v", key(w), got, w)
		}
	}
	if len(bars) != len(want) {
		t.Errorf("%d bars drawn, the history holds %d batches", len(bars), len(want))
	}
	var labels []string
	p.Eval(t, `Array.from(document.querySelectorAll("svg a.task-label")).map(a => a.textContent + ">" + a.getAttribute("href")).sort()`, &labels)
	if want := []string{"extract>/task/extract", "match>/task/match", "mesh>/task/mesh"}; !slices.Equal(labels, want) {
		t.Errorf("timeline rows %v, want %v", labels, want)
	}
	p.Screenshot(t, filepath.Join(shots, "timeline.png"))
	checkNoErrors(t, "/timeline", p)

	// The task graph.
	p = b.Open(t, base+"/graph")
	p.WaitFor(t, `document.querySelectorAll(".node").length === 3 && document.querySelectorAll("svg.edges path").length === 2`, 30*time.Second)
	var nodes []string
	p.Eval(t, `Array.from(document.querySelectorAll(".node")).map(n => n.dataset.task + ":" + n.dataset.phase)`, &nodes)
	slices.Sort(nodes)
	if want := []string{"extract:Done", "match:Done", "mesh:Done"}; !slices.Equal(nodes, want) {
		t.Errorf("graph nodes %v, want %v", nodes, want)
	}
	var edges []string
	p.Eval(t, `Array.from(document.querySelectorAll("svg.edges path")).map(e => e.dataset.from + ">" + e.dataset.to).sort()`, &edges)
	if want := []string{"extract>match", "match>mesh"}; !slices.Equal(edges, want) {
		t.Errorf("graph edges %v, want %v", edges, want)
	}
	p.Screenshot(t, filepath.Join(shots, "graph.png"))
	checkNoErrors(t, "/graph", p)

	// A task's page: conditions, batches, the scatter, the log as text.
	p = b.Open(t, base+"/task/match")
	p.WaitFor(t, `document.querySelectorAll("#conditions tr").length > 1 && document.querySelectorAll("circle.sample").length > 0`, 30*time.Second)
	var page struct {
		Killed, Samples, Rows int
	}
	p.Eval(t, `({Killed: document.querySelectorAll("#batches tr[data-outcome=MemoryExceeded]").length,
		Samples: document.querySelectorAll("circle.sample").length, Rows: document.querySelectorAll("#batches tr").length - 1})`, &page)
	if page.Killed == 0 || page.Samples != len(match.Samples) || page.Rows < 3 {
		t.Errorf("match's page: %+v, want its kill in the batches table and %d samples", page, len(match.Samples))
	}
	p.Screenshot(t, filepath.Join(shots, "task.png"))
	checkNoErrors(t, "/task/match", p)

	p = b.Open(t, base+"/task/mesh")
	p.WaitFor(t, `document.getElementById("log") !== null`, 30*time.Second)
	var logView struct {
		Text   string
		Images int
		Title  string
	}
	p.Eval(t, `({Text: document.getElementById("log").textContent, Images: document.querySelectorAll("main img").length, Title: document.title})`, &logView)
	if !strings.Contains(logView.Text, "<script>document.title=1</script>") || logView.Images != 0 || logView.Title == "1" {
		t.Errorf("mesh's log shown as markup: %+v", logView)
	}
	checkNoErrors(t, "/task/mesh", p)

	// A second browser, of another user (uid 65534, through `view` run
	// as them): the machine's usage as "other users", none of the
	// spool's task names or logs.
	openToOthers(t, filepath.Dir(spool))
	url := viewAs(t, 65534, spool)
	fwd := url[:strings.Index(url, "/?")]
	other := browsertest.Start(t)
	p = other.Open(t, url)
	p.WaitFor(t, `window.lardonView && window.lardonView.charts.memory && window.lardonView.updates > 0`, 30*time.Second)
	var names []string
	p.Eval(t, `window.lardonView.charts.memory.names`, &names)
	if !slices.Contains(names, webview.OtherUsers) || slices.Contains(names, "match") || slices.Contains(names, "mesh") {
		t.Errorf("another user's memory chart stacks %v: want %q alone", names, webview.OtherUsers)
	}
	var taskLinks int
	p.Eval(t, `document.querySelectorAll('a[href^="/task/"]').length`, &taskLinks)
	if taskLinks != 0 {
		t.Errorf("another user's machine page links to %d tasks, want none", taskLinks)
	}
	checkNoErrors(t, "/ (another user)", p)
	p = other.Open(t, fwd+"/timeline")
	p.WaitFor(t, `window.lardonView.updates > 0`, 30*time.Second)
	var bobBars int
	p.Eval(t, `document.querySelectorAll("rect.batch").length`, &bobBars)
	p.Eval(t, `Array.from(document.querySelectorAll("svg a.task-label")).map(a => a.textContent)`, &labels)
	if bobBars != 0 || len(labels) != 0 {
		t.Errorf("another user's timeline: %d bars, rows %v; want none", bobBars, labels)
	}
	p = other.Open(t, fwd+"/graph")
	p.WaitFor(t, `window.lardonView.updates > 0`, 30*time.Second)
	p.Eval(t, `Array.from(document.querySelectorAll(".node")).map(n => n.dataset.task)`, &nodes)
	if len(nodes) != 0 {
		t.Errorf("another user's graph: %v, want no node", nodes)
	}
	p = other.Open(t, fwd+"/task/mesh")
	p.WaitFor(t, `document.getElementById("status").textContent.includes("404")`, 30*time.Second)
	var text string
	p.Eval(t, `document.body.textContent`, &text)
	if strings.Contains(text, "document.title=1") || strings.Contains(text, "extract") {
		t.Errorf("another user's page of mesh shows its log or names:\n%s", text)
	}
	p.Screenshot(t, filepath.Join(shots, "another-user-task.png"))
	t.Logf("screenshots in %s", shots)
}

// checkNoErrors fails t for every error the page reported.
func checkNoErrors(t *testing.T, page string, p *browsertest.Page) {
	t.Helper()
	for _, e := range p.Errors() {
		t.Errorf("%s: %s", page, e)
	}
}

// getJSON decodes the JSON at url into v, asked with the view's token.
func getJSON(t *testing.T, token, url string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// The machine's series outlive the controller: saved beside the learned
// history when it stops (SIGTERM), served again by the next one, which
// goes on adding to them.
func TestWebViewSeriesSurviveARestart(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "a.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: a}\nspec:\n  command: [sleep, '2']\n  items: {count: 1}\n")
	args := []string{"--http-addr", "127.0.0.1:0", "--view-interval", "100ms"}
	c := startController(t, spool, args...)
	base := "http://" + viewAddr(t, c)
	var before webview.MachineAnswer
	eventually(t, time.Minute, "a's reservation in the series", func() bool {
		getJSON(t, viewToken(t, spool), base+"/api/machine", &before)
		for _, p := range before.Points {
			if len(p.Tasks) > 0 && p.Tasks[0].Task == "a" {
				return true
			}
		}
		return false
	})
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	c.wait(t, 30*time.Second)
	series := filepath.Join(filepath.Dir(testHistoryPath(spool)), webview.SeriesFile)
	if _, err := os.Stat(series); err != nil {
		t.Fatalf("no series beside the learned history: %v", err)
	}
	last := before.Points[len(before.Points)-1].T
	c = startController(t, spool, args...)
	base = "http://" + viewAddr(t, c)
	var after webview.MachineAnswer
	getJSON(t, viewToken(t, spool), base+"/api/machine", &after)
	kept, held := 0, false
	for _, p := range after.Points {
		if p.T <= last {
			kept++
			held = held || len(p.Tasks) > 0 && p.Tasks[0].Task == "a"
		}
	}
	if kept < len(before.Points) || !held {
		t.Errorf("after a restart the view serves %d of the %d points served before (a's reservation among them: %v)", kept, len(before.Points), held)
	}
}

// viewAddr is the address a controller started with --http-addr
// 127.0.0.1:0 logged for its web view.
func viewAddr(t *testing.T, c *controller) string {
	t.Helper()
	var addr string
	eventually(t, 10*time.Second, "the web view's address in the log", func() bool {
		addr = loggedAddr(c.stderr.String(), "serving web view")
		return addr != ""
	})
	return addr
}

// loggedAddr is the address the last JSON log line with this message
// names ("" when none).
func loggedAddr(log, message string) string {
	addr := ""
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"message":"`+message+`"`) {
			_, rest, _ := strings.Cut(line, `"addr":"`)
			addr, _, _ = strings.Cut(rest, `"`)
		}
	}
	return addr
}
