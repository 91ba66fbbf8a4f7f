package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/webview"
)

// viewToken is the TCP view's token of the isolated controller on spool.
func viewToken(t *testing.T, spool string) string {
	t.Helper()
	return strings.TrimSpace(readFile(t, filepath.Join(filepath.Dir(testHistoryPath(spool)), TokenFile)))
}

// openToOthers makes dir and the directories above it, up to the system's
// temporary one, reachable by other users (t.TempDir makes them 0700).
func openToOthers(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// viewAs starts `lardon3d-controller view` as uid (setpriv, a real peer of
// the controller's socket) for spool and returns the URL it printed, with
// its token; it stops when t ends.
func viewAs(t *testing.T, uid int, spool string) string {
	t.Helper()
	bin := binaries(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) is needed to start another user's process: %v", err)
	}
	id := strconv.Itoa(uid)
	cmd := exec.Command("setpriv", "--reuid="+id, "--regid="+id, "--clear-groups",
		filepath.Join(bin, "lardon3d-controller"), "view", "--spool", spool, "--log-format", "json")
	cmd.Env = isolated(os.Environ(), spool)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("view as uid %d:\n%s", uid, out.String())
		}
	})
	var url string
	eventually(t, 20*time.Second, "view's URL", func() bool {
		_, rest, ok := strings.Cut(out.String(), "Open ")
		url, _, _ = strings.Cut(rest, "\n")
		return ok && strings.Contains(rest, "\n")
	})
	return url
}

// browse is a client with its own cookies (a browser of its own) that
// opened url: the token's first visit.
func browse(t *testing.T, url string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return c
}

// fetch is c's answer to url: its status and body.
func fetch(t *testing.T, c *http.Client, url string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// One root controller serves root's spool and bob's (uid 65534). Bob,
// through `lardon3d-controller view` run as him (a real peer of the
// view's socket), sees his own task and its log, and none of root's
// names or logs anywhere (/timeline, /api/...), root's usage summed as
// "other users"; his forwarded port refuses whoever lacks his token.
// Root, with the controller's token on TCP, sees both; without it,
// nothing.
func TestTheViewShowsEachUserTheirOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a controller serving two users' spools (CI runs as root)")
	}
	sp := spoolsOfOneMachine(t, 2) // spool1 root's, spool2 bob's
	openToOthers(t, filepath.Dir(sp[0]))
	if err := os.Chown(sp[1], 65534, 65534); err != nil {
		t.Fatal(err)
	}
	task := func(name, line string) string {
		return fmt.Sprintf("apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: %s}\nspec:\n  command: [sh, -c, 'echo %s; sleep 1']\n  items: {count: 1}\n", name, line)
	}
	writeManifest(t, sp[0], "rootjob.yaml", task("rootjob", "db_password=hunter2"))
	bobs := writeManifest(t, sp[1], "bobjob.yaml", task("bobjob", "bob-private-line"))
	if err := os.Chown(bobs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	c := startController(t, sp[0], "--spool", sp[1], "--metrics-addr", "127.0.0.1:0", "--view-interval", "100ms")
	eventually(t, 2*time.Minute, "both tasks Done", func() bool {
		return phaseOf(t, filepath.Join(sp[0], "rootjob.yaml")) == v1alpha1.PhaseDone &&
			phaseOf(t, filepath.Join(sp[1], "bobjob.yaml")) == v1alpha1.PhaseDone
	})
	base := "http://" + metricsAddr(t, c)

	url := viewAs(t, 65534, sp[1])
	bob := browse(t, url)
	port, _, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	fwd := "http://" + port
	for _, path := range []string{"/", "/timeline", "/api/tasks", "/api/tasks?limit=0", "/api/batches", "/api/machine", "/api/tasks/spool2/bobjob"} {
		code, body := fetch(t, bob, fwd+path)
		if code != http.StatusOK {
			t.Errorf("bob GET %s: %d %s", path, code, body)
		}
		for _, secret := range []string{"rootjob", "hunter2", "spool1"} {
			if strings.Contains(body, secret) {
				t.Errorf("bob GET %s: the answer names %q:\n%s", path, secret, body)
			}
		}
	}
	if code, body := fetch(t, bob, fwd+"/api/tasks/spool2/bobjob"); !strings.Contains(body, "bob-private-line") {
		t.Errorf("bob's own task's page: %d, its log missing:\n%s", code, body)
	}
	if code, _ := fetch(t, bob, fwd+"/api/tasks/spool1/rootjob"); code != http.StatusNotFound {
		t.Errorf("root's task's page as bob: %d, want 404", code)
	}
	_, machine := fetch(t, bob, fwd+"/api/machine")
	if !strings.Contains(machine, `"task":"`+webview.OtherUsers+`"`) {
		t.Errorf("bob's machine charts never show root's usage as %q:\n%s", webview.OtherUsers, tail(machine, 3000))
	}
	// Anyone else at bob's port: no cookie, no token.
	for _, path := range []string{"/", "/api/tasks", "/api/tasks/spool2/bobjob"} {
		if code, body := fetch(t, http.DefaultClient, fwd+path); code != http.StatusForbidden || strings.Contains(body, "bobjob") {
			t.Errorf("GET %s at bob's port without his token: %d %s", path, code, body)
		}
	}

	// Root on TCP: the token or nothing.
	if code, body := fetch(t, http.DefaultClient, base+"/api/tasks/spool1/rootjob"); code != http.StatusForbidden || strings.Contains(body, "hunter2") {
		t.Errorf("the TCP view without its token: %d %s", code, body)
	}
	auth := []string{"Authorization", "Bearer " + viewToken(t, sp[0])}
	if code, body := fetch(t, http.DefaultClient, base+"/api/tasks/spool1/rootjob", auth...); code != http.StatusOK || !strings.Contains(body, "hunter2") {
		t.Errorf("root's task's page with the token: %d %s", code, body)
	}
	if _, body := fetch(t, http.DefaultClient, base+"/api/tasks", auth...); !strings.Contains(body, "bobjob") || !strings.Contains(body, "rootjob") {
		t.Errorf("root's tasks with the token: %s", body)
	}
}

// 400 keep-alive connections to the controller's view (more than its 256
// descriptors), 100 more to its socket, held while a task runs six
// batches one after the other: the task ends Done, `get` answers, no
// descriptor ran out, and another user (uid 65534, as root) still opens
// their view through the socket.
func TestAConnectionFloodNeverFailsABatch(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Fatalf("prlimit (util-linux) is needed: %v", err)
	}
	spool := newSpool(t)
	c := startControllerUnder(t, []string{"prlimit", "--nofile=256:256", "--"}, spool, "--metrics-addr", "127.0.0.1:0")
	addr := metricsAddr(t, c)
	socket := filepath.Join(filepath.Dir(spool), "machine-run", webview.SocketName(c.cmd.Process.Pid))
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	flood := func(network, address string, n int) {
		for range n { // bounded: n connections
			conn, err := net.Dial(network, address)
			if err != nil {
				t.Fatalf("connection %d to %s: %v", len(conns), address, err)
			}
			// A request, then nothing: the connection stays open, idle.
			_, _ = conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"))
			conns = append(conns, conn)
		}
	}
	flood("tcp", addr, 400)
	flood("unix", socket, 100)
	writeManifest(t, spool, "job.yaml", `apiVersion: lardon3d.io/v1alpha1
kind: Task
metadata: {name: job}
spec:
  command: [sh, -c, 'sleep 0.2']
  items: {count: 6}
  resources: {batch: {max: 1}}
`)
	eventually(t, 2*time.Minute, "job Done or Failed", func() bool {
		p := phaseOf(t, filepath.Join(spool, "job.yaml"))
		return p == v1alpha1.PhaseDone || p == v1alpha1.PhaseFailed
	})
	if p := phaseOf(t, filepath.Join(spool, "job.yaml")); p != v1alpha1.PhaseDone {
		t.Fatalf("under a connection flood the task ended %s:\n%s", p, readFile(t, filepath.Join(spool, "job.yaml")))
	}
	out, code := runCLI(t, "get", "--spool", spool)
	if code != 0 || !strings.Contains(out, "job") {
		t.Errorf("get under a connection flood: exit %d\n%s", code, out)
	}
	if log := c.stderr.String(); strings.Contains(log, "too many open files") {
		t.Errorf("the controller ran out of descriptors:\n%s", tail(log, 3000))
	}
	// Root's flood of the socket and of TCP leaves another user's view
	// theirs (their uid's own bound, the socket's own half).
	if os.Geteuid() == 0 {
		openToOthers(t, filepath.Dir(spool))
		browse(t, viewAs(t, 65534, spool)) // fails t unless the view answers 200
	}
	// Still served to a newcomer once the flood is gone.
	for _, conn := range conns {
		conn.Close()
	}
	conns = nil
	eventually(t, 30*time.Second, "/healthz answering again", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// `--metrics-addr :PORT` and `--http-addr :PORT` listen on loopback
// alone: a non-loopback address of the machine is refused at that port.
// Every path checks the Host (the metrics too), and the view there needs
// its token.
func TestMetricsAddrPortAloneIsLoopback(t *testing.T) {
	var outside net.IP
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			outside = n.IP
			break
		}
	}
	if outside == nil {
		t.Fatalf("the machine has no non-loopback IPv4 address to try (%v)", addrs)
	}
	spool := newSpool(t)
	writeManifest(t, spool, "job.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata: {name: job}\nspec:\n  command: [sh, -c, 'echo the-log-line']\n  items: {count: 1}\n")
	c := startController(t, spool, "--metrics-addr", ":0", "--http-addr", ":0")
	eventually(t, time.Minute, "job Done", func() bool { return phaseOf(t, filepath.Join(spool, "job.yaml")) == v1alpha1.PhaseDone })
	for _, addr := range []string{metricsAddr(t, c), viewAddr(t, c)} {
		host, port, _ := net.SplitHostPort(addr)
		if host != "127.0.0.1" {
			t.Errorf("a port alone listens on %s", addr)
		}
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(outside.String(), port), 5*time.Second); err == nil {
			conn.Close()
			t.Errorf("%s:%s (not loopback) accepted a connection", outside, port)
		}
	}
	metrics := "http://" + metricsAddr(t, c)
	req, _ := http.NewRequest(http.MethodGet, metrics+"/metrics", nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("/metrics for a rebound Host: %v %v, want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, _ := fetch(t, http.DefaultClient, metrics+"/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
	view := "http://" + viewAddr(t, c)
	if code, body := fetch(t, http.DefaultClient, view+"/api/tasks/job"); code != http.StatusForbidden || strings.Contains(body, "the-log-line") {
		t.Errorf("the view without its token: %d %s", code, body)
	}
	if code, body := fetch(t, http.DefaultClient, view+"/api/tasks/job", "Authorization", "Bearer "+viewToken(t, spool)); code != http.StatusOK || !strings.Contains(body, "the-log-line") {
		t.Errorf("the view with its token: %d %s", code, body)
	}
}

// `view` trusts a socket only when the claim's user owns it: anyone may
// make a file in the registry directory, and a socket of theirs named as
// root's would show a view of their making.
func TestViewTrustsOnlyTheControllersOwnSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a socket given to another user (CI runs as root)")
	}
	spool := newSpool(t)
	c := startController(t, spool, "--http-addr", "127.0.0.1:0")
	viewAddr(t, c)
	socket := filepath.Join(filepath.Dir(spool), "machine-run", webview.SocketName(c.cmd.Process.Pid))
	if err := os.Lchown(socket, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "lardon3d-controller"), "view", "--spool", spool)
	cmd.Env = isolated(os.Environ(), spool)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil || err == nil || !strings.Contains(string(out), "serves no web view") {
		t.Errorf("view with the controller's socket owned by another user: %v\n%s", err, out)
	}
}
