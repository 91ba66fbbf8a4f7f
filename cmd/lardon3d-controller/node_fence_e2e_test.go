package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/lardon3d/lardon3d-controller/pkg/kubeapi"
)

// The node agent's liveness tests: an API server outage, and one node cut
// off from it, with real agents against a real kube-apiserver.

// tickingBatch is the synth part of a batch that, after lardon3d-synth,
// appends "tick NODE TASK BATCHSTART NANOS" to the record every 100 ms,
// n times: the writes a batch makes to shared data while it runs.
func (f *farm) tickingBatch(n int) string {
	return fmt.Sprintf(`--hold 0s && i=0 && while [ $i -lt %d ]; do echo "tick $NODE $LARDON3D_TASK $LARDON3D_BATCH_START $(date +%%s%%N)" >> %s; sleep 0.1; i=$((i+1)); done`, n, f.record)
}

// ticks returns, by node, the times of the ticks the batches wrote.
func (f *farm) ticks() map[string][]int64 {
	f.t.Helper()
	fh, err := os.Open(f.record)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	out := map[string][]int64{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 5 || fs[0] != "tick" {
			continue
		}
		at, err := strconv.ParseInt(fs[4], 10, 64)
		if err != nil {
			f.t.Fatalf("record line %q", sc.Text())
		}
		out[fs[1]] = append(out[fs[1]], at)
	}
	return out
}

// TestNodeAPIServerOutageKillsNoBatch: the API server stops (SIGSTOP) for
// three lease durations while two agents run tasks. Each agent stops its
// batches once it cannot renew (self-fencing) and lets them go on once it
// can; neither takes over the other's tasks (each saw nobody renew while it
// could not reach the server, so it watches every Lease for a whole
// duration again): every task ends Done under its first claim, and every
// batch ran once, to its end.
func TestNodeAPIServerOutageKillsNoBatch(t *testing.T) {
	f := newFarm(t)
	f.start("node-a", "--memory-capacity", "64Mi")
	f.start("node-b", "--memory-capacity", "64Mi")
	const n = 4
	for i := range n {
		f.createTask(fmt.Sprintf("o%d", i), 3, 1, f.tickingBatch(10), "")
	}
	f.waitFor("both nodes running a task", time.Minute, func(ts []kubeapi.Task) bool {
		return len(heldBy(ts, "node-a")) > 0 && len(heldBy(ts, "node-b")) > 0
	})
	time.Sleep(300 * time.Millisecond) // batches in flight
	resume := f.env.StopAPIServer(t)
	stoppedAt := time.Now()
	time.Sleep(6 * time.Second) // the lease is 2 s
	resume()
	t.Logf("API server stopped for %v", time.Since(stoppedAt).Round(time.Millisecond))

	ts := f.waitFor("every task Done", 2*time.Minute, allDone)
	for _, task := range ts {
		if cl := task.Status.Claim; cl == nil || cl.Seq != 1 {
			t.Errorf("%s: claim %+v, want its first claim: a node took a task over during the outage", task.Name, cl)
		}
	}
	count := map[string]int{}
	for _, r := range f.runs() {
		if r.to == 0 {
			t.Errorf("batch %s@%d on %s has no end: it was killed", r.task, r.start, r.node)
		}
		count[fmt.Sprintf("%s@%d", r.task, r.start)]++
	}
	if len(count) != n*3 {
		t.Errorf("%d batches ran, want %d", len(count), n*3)
	}
	for b, c := range count {
		if c != 1 {
			t.Errorf("batch %s ran %d times", b, c)
		}
	}
	fenced := 0
	for _, a := range f.agents {
		data, err := os.ReadFile(a.log)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "self-fenced") {
			fenced++
		}
	}
	if fenced != 2 {
		f.dumpLogs()
		t.Errorf("%d of 2 agents stopped their batches while they could not renew", fenced)
	}
}

// TestNodeCutOffStopsItsBatchesBeforeTakeover: node-a, alone with a task
// whose batches write to the shared record every 100 ms, is cut off from
// the API server (its connections through a proxy are closed and new ones
// hang). It stops its batch at its renew deadline, before node-b may take
// the task over at the lease's expiry: node-a's last write comes before
// node-b's first. Reconnected, node-a finds the task held under claim 2,
// and its stopped batch is killed, never resumed.
func TestNodeCutOffStopsItsBatchesBeforeTakeover(t *testing.T) {
	f := newFarm(t)
	proxy := newCutProxy(t, f.env.Config.Host)
	a := f.start("node-a", "--memory-capacity", "64Mi", "--kubeconfig", f.kubeconfigVia(proxy.addr()), "--lease-duration", "3s")
	f.createTask("cut", 3, 1, f.tickingBatch(60), "")
	f.waitFor("node-a running the task", time.Minute, func(ts []kubeapi.Task) bool {
		return len(heldBy(ts, "node-a")) == 1 && ts[0].Status.Phase == "Running"
	})
	f.start("node-b", "--memory-capacity", "64Mi", "--lease-duration", "3s")
	time.Sleep(time.Second) // node-b sees node-a's renewals
	for len(f.ticks()["node-a"]) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	proxy.cut()
	cutAt := time.Now()
	f.waitFor("the task taken over by node-b", time.Minute, func(ts []kubeapi.Task) bool {
		cl := ts[0].Status.Claim
		return cl != nil && cl.Node == "node-b" && cl.Seq == 2
	})
	takenAt := time.Now()
	t.Logf("taken over %v after the cut", takenAt.Sub(cutAt).Round(time.Millisecond))
	proxy.heal()
	f.waitFor("the task Done", 2*time.Minute, allDone)
	// node-a finds it lost the task once it reaches the server again.
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, err := os.ReadFile(a.log)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"message":"fenced: this node lost the task`) {
			break
		}
		if time.Now().After(deadline) {
			f.dumpLogs()
			t.Fatal("node-a never found, reconnected, that it lost the task")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a resumed batch would tick again

	ticks := f.ticks()
	lastA, firstB := int64(0), int64(1<<63-1)
	for _, at := range ticks["node-a"] {
		lastA = max(lastA, at)
	}
	for _, at := range ticks["node-b"] {
		firstB = min(firstB, at)
	}
	if len(ticks["node-b"]) == 0 {
		t.Fatal("node-b wrote nothing")
	}
	t.Logf("node-a's last write %v after the cut, node-b's first %v after it",
		time.Duration(lastA-cutAt.UnixNano()).Round(time.Millisecond), time.Duration(firstB-cutAt.UnixNano()).Round(time.Millisecond))
	if lastA >= firstB {
		t.Errorf("node-a wrote %v after node-b's first write: both ran the task at once", time.Duration(lastA-firstB))
	}
	// The renew deadline is 2 s of the 3 s lease, counted from the last
	// renewal, which started at most a renew period (400 ms) before the
	// cut: the batch is stopped by then, give or take a tick, and before
	// any node could see the Lease expire (3 s after that renewal).
	limit := cutAt.Add(2*time.Second + 500*time.Millisecond).UnixNano()
	if lastA > limit {
		t.Errorf("node-a wrote %v after the cut, past its renew deadline", time.Duration(lastA-cutAt.UnixNano()))
	}
	for _, r := range f.runs() {
		if r.node == "node-a" && r.to > limit {
			t.Errorf("node-a's batch %s@%d ended %v after the cut: it was resumed", r.task, r.start, time.Duration(r.to-cutAt.UnixNano()))
		}
	}
}

// kubeconfigVia writes a copy of the farm's kubeconfig whose server is
// addr (host:port) and returns its path.
func (f *farm) kubeconfigVia(addr string) string {
	f.t.Helper()
	cfg, err := clientcmd.LoadFromFile(f.kubeconfig)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + addr
	}
	path := filepath.Join(f.dir, "kubeconfig-via-"+strings.ReplaceAll(addr, ":", "-"))
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		f.t.Fatal(err)
	}
	return path
}

// cutProxy forwards TCP connections to an API server until cut: then it
// closes those open and holds new ones unanswered, as a network that
// drops every packet would, until heal.
type cutProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newCutProxy(t testing.TB, server string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		t.Fatalf("API server address %q: %v", server, err)
	}
	p := &cutProxy{t: t, ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.closeAll() })
	go p.serve()
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = true
		down := p.down
		p.mu.Unlock()
		if down {
			continue // held: never answered, closed by heal
		}
		go p.forward(c)
	}
}

func (p *cutProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close(); c.Close() }()
	_, _ = io.Copy(c, up)
	up.Close()
	c.Close()
}

func (p *cutProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// cut closes every connection and holds the next ones.
func (p *cutProxy) cut() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.closeAll()
}

// heal closes the held connections and forwards again.
func (p *cutProxy) heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
	p.closeAll()
}
