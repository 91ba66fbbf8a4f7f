package webview

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// twoUsers is a host serving root's spool and the spool of uid 65534
// (its directory chowned), each with a task holding a contract and
// running a batch, and a finished batch of each in the history; the
// names of root's hold "secret".
func twoUsers(t *testing.T) (h *fakeHost, alice, root string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a spool to another user (CI runs as root)")
	}
	base := t.TempDir()
	alice, root = filepath.Join(base, "alice"), filepath.Join(base, "root")
	for _, d := range []string{alice, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(alice, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	h = &fakeHost{spools: []string{alice, root}}
	h.budgets.Memory = governor.BudgetState{Capacity: 8 * gib, Reserved: 3 * gib}
	h.tasks = []reconcile.TaskView{
		{Spool: alice, File: "mine.yaml", Row: listing.Row{Name: "mine", Phase: v1alpha1.PhaseRunning, Profile: "p"}},
		{Spool: root, File: "secret.yaml", Row: listing.Row{Name: "secret-job", Phase: v1alpha1.PhaseRunning, Profile: "p"}},
		{Spool: root, File: "done.yaml", Row: listing.Row{Name: "secret-done", Phase: v1alpha1.PhaseDone}},
	}
	h.held = []reconcile.HeldContract{
		{Spool: alice, Task: "mine", Contract: governor.Contract{MemoryBytes: gib, Threads: 1}},
		{Spool: root, Task: "secret-job", Contract: governor.Contract{MemoryBytes: 2 * gib, Threads: 2}},
	}
	h.running = []reconcile.RunningBatch{
		{Spool: alice, Task: "mine", Index: 1, Attempt: 1, Size: 1, MemoryBytes: 100 << 20},
		{Spool: root, Task: "secret-job", Index: 3, Attempt: 1, Size: 1, MemoryBytes: 300 << 20},
	}
	h.finished = []reconcile.BatchRow{
		{Task: "mine", Profile: "p", Batch: 0, Attempt: 1},
		{Task: "secret-job", Profile: "p", Batch: 0, Attempt: 1},
	}
	return h, alice, root
}

// get decodes srv's answer at path into v, and returns its status.
func get(t *testing.T, srv *httptest.Server, path string, v any) int {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

// A user sees their own spool's tasks, batches and names, and the other
// spools' usage summed as OtherUsers, never their names; an admin sees
// everything; a request no listener named the viewer of gets nothing.
func TestAUserSeesOnlyTheirOwnSpools(t *testing.T) {
	h, alice, _ := twoUsers(t)
	v := newTestView(h)
	v.rec.Sample(time.Unix(1, 0))
	user := httptest.NewServer(As(Viewer{UID: 65534}, v))
	defer user.Close()
	admin := httptest.NewServer(As(Viewer{UID: 1000, All: true}, v))
	defer admin.Close()
	nobody := httptest.NewServer(v)
	defer nobody.Close()

	// Every answer the user gets, raw: no name of root's anywhere.
	for _, path := range []string{"/api/tasks", "/api/tasks?limit=0", "/api/batches", "/api/machine", "/api/tasks/alice/mine"} {
		resp, err := http.Get(user.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.Contains(b.String(), "secret") || strings.Contains(b.String(), "/root") {
			t.Errorf("GET %s as uid 65534: %d %s", path, resp.StatusCode, b.String())
		}
	}
	var tasks TasksAnswer
	get(t, user, "/api/tasks", &tasks)
	if tasks.Total != 1 || len(tasks.Tasks) != 1 || tasks.Tasks[0].Name != "alice/mine" || tasks.Phases["Done"] != 0 {
		t.Errorf("the user's tasks: %+v, want alice/mine alone", tasks)
	}
	if code := get(t, user, "/api/tasks/root/secret-job", nil); code != http.StatusNotFound {
		t.Errorf("root's task's page as uid 65534: %d, want 404 (as if it did not exist)", code)
	}
	var batches BatchesAnswer
	get(t, user, "/api/batches", &batches)
	if len(batches.Batches) != 2 || batches.Batches[0].Task != "mine" || batches.Batches[1].Task != "alice/mine" {
		t.Errorf("the user's timeline: %+v, want mine's finished and running batches", batches.Batches)
	}
	var m MachineAnswer
	get(t, user, "/api/machine", &m)
	if len(m.Points) != 1 || len(m.Points[0].Tasks) != 2 {
		t.Fatalf("the user's machine: %+v", m.Points)
	}
	mine, others := m.Points[0].Tasks[0], m.Points[0].Tasks[1]
	if mine.Task != "alice/mine" || mine.Spool != alice || mine.Memory != gib {
		t.Errorf("the user's own use: %+v", mine)
	}
	if others.Task != OtherUsers || others.Spool != "" || others.Memory != 2*gib || others.Used != 300<<20 || others.Threads != 2 {
		t.Errorf("the other users' use: %+v, want root's summed without its name", others)
	}
	if m.Points[0].Memory.Reserved != 3*gib {
		t.Errorf("the machine's reservations: %d, want every user's", m.Points[0].Memory.Reserved)
	}

	get(t, admin, "/api/tasks", &tasks)
	if tasks.Total != 3 {
		t.Errorf("the admin's tasks: %d, want 3", tasks.Total)
	}
	get(t, admin, "/api/batches", &batches)
	if len(batches.Batches) != 4 {
		t.Errorf("the admin's timeline: %d batches, want 4", len(batches.Batches))
	}
	if code := get(t, admin, "/api/tasks/root/secret-job", nil); code != http.StatusOK {
		t.Errorf("root's task's page as an admin: %d", code)
	}
	get(t, admin, "/api/machine", &m)
	if len(m.Points[0].Tasks) != 2 || m.Points[0].Tasks[1].Task != "root/secret-job" {
		t.Errorf("the admin's machine: %+v", m.Points[0].Tasks)
	}
	for _, path := range []string{"/", "/api/tasks", "/api/machine"} {
		if code := get(t, nobody, path, nil); code != http.StatusForbidden {
			t.Errorf("GET %s with no viewer: %d, want 403", path, code)
		}
	}
}

// Root and the admin group, by the process's group, see every spool;
// another user does not.
func TestAdmins(t *testing.T) {
	a, err := AdminGroup("4243")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a        Admins
		uid, gid uint32
		all      bool
	}{{a, 0, 0, true}, {a, 4242, 4243, true}, {a, 4242, 4242, false}, {NoAdmins, 4242, 4243, false}, {NoAdmins, 0, 5, true}} {
		if got := c.a.Viewer(c.uid, c.gid); got.All != c.all || got.UID != c.uid {
			t.Errorf("%+v.Viewer(%d, %d) = %+v, want All %v", c.a, c.uid, c.gid, got, c.all)
		}
	}
	if _, err := AdminGroup("no-such-group-lardon3d"); err == nil {
		t.Error("an unknown group: no error")
	}
}

// The token gate: nothing without the token, a cookie and a redirect
// without it on the first visit, then the cookie (or a bearer header);
// a rebound Host is refused even with the token.
func TestTokenGate(t *testing.T) {
	const token = "0123456789abcdef"
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("in " + r.URL.RawQuery)) })
	srv := httptest.NewServer(TokenGate(token, ok))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(path string, mod func(*http.Request)) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if mod != nil {
			mod(req)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for name, mod := range map[string]func(*http.Request){
		"no token":      nil,
		"a wrong token": func(r *http.Request) { r.URL.RawQuery = "token=nope" },
		"a wrong cookie": func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: cookieName(r.URL.Host), Value: "nope"})
		},
		"a wrong bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") },
		"a token named by another host": func(r *http.Request) {
			r.URL.RawQuery, r.Host = "token="+token, "evil.example"
		},
	} {
		if resp := do("/api/tasks", mod); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, resp.StatusCode)
		}
	}
	resp := do("/timeline?task=a&token="+token, nil)
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc.Path != "/timeline" || loc.Query().Get("token") != "" || loc.Query().Get("task") != "a" {
		t.Fatalf("first visit: %d to %q, want a redirect to /timeline?task=a", resp.StatusCode, loc)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Value == token {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("first visit: cookie %+v", resp.Cookies())
	}
	if resp := do("/timeline?task=a", func(r *http.Request) { r.AddCookie(cookie) }); resp.StatusCode != http.StatusOK {
		t.Errorf("with the cookie: %d", resp.StatusCode)
	}
	if resp := do("/api/tasks", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }); resp.StatusCode != http.StatusOK {
		t.Errorf("with the bearer token: %d", resp.StatusCode)
	}
}

// The limiter closes the connections over a peer's bound and over the
// total, and takes new ones once others closed: the peers of
// 127.0.0.1 and 127.0.0.2 (both loopback) are two.
func TestLimiterBoundsConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := NewLimiter(ConnLimits{Total: 6, PerPeer: 4})
	lln := lim.Listener(ln)
	defer lln.Close()
	go func() {
		for {
			c, err := lln.Accept()
			if err != nil {
				return
			}
			go func() { // "ok", then held until the client closes
				_, _ = c.Write([]byte("ok\n"))
				_, _ = bufio.NewReader(c).ReadString('\n')
				_ = c.Close()
			}()
		}
	}()
	// dial connects from local and reports whether it was served.
	dial := func(local string) (net.Conn, bool) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(c).ReadString('\n')
		return c, line == "ok\n"
	}
	var open []net.Conn
	for i := range 4 {
		c, ok := dial("127.0.0.1")
		if !ok {
			t.Fatalf("connection %d of 127.0.0.1 refused under its bound", i)
		}
		open = append(open, c)
	}
	if c, ok := dial("127.0.0.1"); ok {
		t.Error("a 5th connection of one peer served, over its bound of 4")
	} else {
		c.Close()
	}
	for i := range 2 {
		c, ok := dial("127.0.0.2")
		if !ok {
			t.Fatalf("connection %d of 127.0.0.2 refused: another peer's bound is not its", i)
		}
		open = append(open, c)
	}
	if c, ok := dial("127.0.0.3"); ok {
		t.Error("a 7th connection served, over the total of 6")
	} else {
		c.Close()
	}
	if lim.Refused() != 2 {
		t.Errorf("%d refused, want 2", lim.Refused())
	}
	open[0].Close()
	// Its place is free once the server closed its end: the next dial of
	// 127.0.0.1 may come before, so try until served (bounded).
	served := false
	for range 1000 {
		c, ok := dial("127.0.0.1")
		if ok {
			served = true
			open = append(open, c)
			break
		}
		c.Close()
	}
	if !served {
		t.Error("a freed place was never taken again")
	}
	for _, c := range open {
		c.Close()
	}
}

// The bounds leave most descriptors to the batches.
func TestDefaultConnLimits(t *testing.T) {
	for nofile, want := range map[uint64]ConnLimits{256: {32, 8}, 20000: {1024, 256}, 64: {16, 4}, 1 << 20: {1024, 256}} {
		if got := DefaultConnLimits(nofile); got != want {
			t.Errorf("DefaultConnLimits(%d) = %+v, want %+v", nofile, got, want)
		}
	}
	if l := DefaultConnLimits(0); l.Total < minConns || l.Total > maxConns {
		t.Errorf("DefaultConnLimits of this process: %+v", l)
	}
}

// The view's socket: what another user put at its name in advance is
// replaced (a directory is refused), every user may connect, and a peer
// is who the kernel says (root here: it sees every spool); a connection
// not counted by a Limiter carries no viewer and gets nothing.
func TestTheSocketKnowsItsPeer(t *testing.T) {
	h, _, _ := twoUsers(t)
	dir := t.TempDir()
	path := filepath.Join(dir, SocketName(42))
	if err := os.WriteFile(path, []byte("planted"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, SocketName(43)), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(filepath.Join(dir, SocketName(43))); err == nil {
		t.Error("a directory at the socket's name: no error")
	}
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o666 {
		t.Errorf("the socket's mode: %v %v", st.Mode(), err)
	}
	v := newTestView(h)
	srv := &http.Server{Handler: v, ConnContext: PeerViewer(NoAdmins)}
	go func() { _ = srv.Serve(NewLimiter(ConnLimits{Total: 4, PerPeer: 2}).Listener(ln)) }()
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}}}
	resp, err := c.Get("http://localhost/api/tasks")
	if err != nil {
		t.Fatal(err)
	}
	var tasks TasksAnswer
	err = json.NewDecoder(resp.Body).Decode(&tasks)
	resp.Body.Close()
	if err != nil || tasks.Total != 3 {
		t.Errorf("root on the socket: %d tasks (%v), want every spool's 3", tasks.Total, err)
	}

	bare := filepath.Join(dir, "bare.sock")
	bln, err := ListenUnix(bare)
	if err != nil {
		t.Fatal(err)
	}
	bsrv := &http.Server{Handler: v, ConnContext: PeerViewer(NoAdmins)}
	go func() { _ = bsrv.Serve(bln) }()
	defer bsrv.Close()
	bc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", bare)
	}}}
	resp, err = bc.Get("http://localhost/api/tasks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a connection with no viewer: %d, want 403", resp.StatusCode)
	}
}
