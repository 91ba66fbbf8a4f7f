package listing

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
)

// counts are a server's answers, by result.
type counts struct{ served, declined atomic.Int64 }

// fixture is a server on a spool of n manifests t00000.., from rows (nil:
// every manifest parsed), its state directory inside the spool's parent,
// and its counts of answers.
func fixture(t *testing.T, n int, rows Rows) (dir, stateDir string, s *Server, c *counts) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "spool")
	stateDir = filepath.Join(filepath.Dir(dir), "state")
	for _, d := range []string{dir, stateDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		write(t, dir, fmt.Sprintf("t%05d.yaml", i), task(fmt.Sprintf("t%05d", i), ""))
	}
	c = &counts{}
	s, err := Serve(stateDir, testSpool(dir), rows, zerolog.Nop(), func(_ time.Duration, ok bool) {
		if ok {
			c.served.Add(1)
		} else {
			c.declined.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return dir, stateDir, s, c
}

// ask sends req as it is on a new connection to the socket at path and
// returns the reply's header, or "" when the connection was closed
// unanswered. With done, the request is followed by the end of what the
// client sends (as from a client that gave up).
func ask(t *testing.T, path, req string, done bool) string {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return "" // closed before reading it all
	}
	if done {
		_ = conn.(*net.UnixConn).CloseWrite()
	}
	head, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return ""
	}
	return strings.TrimSpace(head)
}

// TestServerAnswersOnlyItsOwnClient: the server answers its own user's
// request with the files Read finds (rows, no task), and declines, or
// closes unanswered, anything else: bad JSON, an unknown field, another
// protocol, another spool, a bad selector, no such task, a request too
// large, another user; none of it stops it serving. A name and a selector
// select. A client that connects and sends nothing does not hold it open
// when it closes, and closed it removes its socket.
func TestServerAnswersOnlyItsOwnClient(t *testing.T) {
	dir, stateDir, s, c := fixture(t, 3, nil)
	path := filepath.Join(stateDir, Socket)
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the socket: %v %v, want mode 0600", st, err)
	}
	listsAll := func(what string) {
		t.Helper()
		files, ok := Ask(stateDir, dir, Query{})
		if !ok {
			t.Fatalf("after %s: not served", what)
		}
		SortByName(files)
		if len(files) != 3 || files[2].Name() != "t00002" || files[2].Path != filepath.Join(dir, "t00002.yaml") || files[2].Task != nil || files[2].Phase() != PhaseNew {
			t.Errorf("after %s, served %+v", what, files)
		}
	}
	listsAll("nothing")
	if files, ok := Ask(stateDir, dir, Query{Name: "t00001"}); !ok || len(files) != 1 || files[0].Name() != "t00001" {
		t.Errorf("one task asked for: %+v (%v)", files, ok)
	}
	if files, ok := Ask(stateDir, dir, Query{Selector: "app!=x"}); !ok || len(files) != 0 {
		t.Errorf("a selector matching none: %+v (%v)", files, ok)
	}

	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	request := func(fields string) string {
		return fmt.Sprintf(`{"protocol":%d,"spool":%q%s}`, Protocol, abs, fields)
	}
	for _, tc := range []struct {
		what, req string
		answered  bool
	}{
		{"bad JSON", `{"protocol":2,`, false},
		{"an unknown field", request(`,"columns":"all"`), false},
		{"another protocol", strings.Replace(request(""), fmt.Sprintf(`"protocol":%d`, Protocol), `"protocol":1`, 1), true},
		{"another spool", strings.Replace(request(""), strconv.Quote(abs), `"/elsewhere"`, 1), true},
		{"a bad selector", request(`,"selector":"a in ("`), true},
		{"no such task", request(`,"name":"nosuch"`), true},
		{"a request larger than allowed", request(`,"selector":"` + strings.Repeat("a", maxRequest) + `"`), false},
	} {
		before := c.declined.Load()
		head := ask(t, path, tc.req, !tc.answered)
		var rep reply
		switch {
		case !tc.answered && head != "":
			t.Errorf("%s: answered %s", tc.what, head)
		case tc.answered && (json.Unmarshal([]byte(head), &rep) != nil || rep.Declined == "" || rep.Files != 0 || rep.Protocol != Protocol):
			t.Errorf("%s: %q, want a declined reply", tc.what, head)
		case tc.answered && c.declined.Load() != before+1:
			t.Errorf("%s: %d declined before, %d after", tc.what, before, c.declined.Load())
		}
		listsAll(tc.what)
	}

	// A client that gave up (closed its connection) while its request
	// waited for another listing (the slot held here) is not listed for.
	before, declinedBefore := c.served.Load(), c.declined.Load()
	s.one <- struct{}{}
	gaveUp, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(gaveUp, request("")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // its request waits for the slot
	_ = gaveUp.Close()
	<-s.one
	deadline := time.Now().Add(10 * time.Second)
	for c.declined.Load() == declinedBefore && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.declined.Load() == declinedBefore || c.served.Load() != before {
		t.Errorf("a client gone: %d declined (%d before), %d served (%d before)", c.declined.Load(), declinedBefore, c.served.Load(), before)
	}

	// Another user is not answered (the peer's credentials).
	s.uid.Store(int64(os.Geteuid() + 1))
	if _, ok := Ask(stateDir, dir, Query{}); ok {
		t.Errorf("another user's client was served")
	}
	s.uid.Store(int64(os.Geteuid()))
	listsAll("another user")

	// A client that sends nothing: Close does not wait for its deadline.
	idle, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(listingDeadline / 2):
		t.Fatal("Close waits for a client that sends nothing")
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket after Close: %v", err)
	}
	if _, ok := Ask(stateDir, dir, Query{}); ok {
		t.Errorf("served after Close")
	}
}

// TestServedFilesAreTheRowsTheControllerHolds: a server on a controller's
// rows sends the row of each manifest of its version, parses the others,
// and lists a flood of new manifests by file name when the query allows.
func TestServedFilesAreTheRowsTheControllerHolds(t *testing.T) {
	rows := &mapRows{m: map[string]*VersionedRow{}}
	dir, stateDir, _, _ := fixture(t, UnparsedNew+5, rows)
	v, err := VersionOf(filepath.Join(dir, "t00000.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rows.mu.Lock()
	rows.m["t00000.yaml"] = &VersionedRow{Version: v, Row: Row{Name: "t00000", Phase: v1alpha1.PhaseDone, Labels: map[string]string{"app": "x"}}}
	rows.mu.Unlock()
	files, ok := Ask(stateDir, dir, Query{ByName: true})
	if !ok || len(files) != UnparsedNew+5 {
		t.Fatalf("served %d files (%v)", len(files), ok)
	}
	f := byName(files)
	if f["t00000.yaml"].Phase() != "Done" || f["t00001.yaml"].Reason() != ReasonNotRead {
		t.Errorf("served: t00000 %+v, t00001 %+v", f["t00000.yaml"], f["t00001.yaml"])
	}
	// What selects by the spec parses every manifest.
	files, ok = Ask(stateDir, dir, Query{ByName: true, Selector: "app=x"})
	if !ok || len(files) != UnparsedNew+5 {
		t.Fatalf("selected %d files (%v)", len(files), ok)
	}
	for _, f := range files {
		if f.NotRead {
			t.Fatalf("listed by name under a selector: %+v", f)
		}
	}
}

// Thirty clients that gave up (they closed after asking) while a listing
// of 2,000 manifests was under way are not listed for: a client asking
// next is served at once, and the server closes without making them.
func TestServerSkipsWhatNobodyWaitsFor(t *testing.T) {
	// Served at all, and how many listings were made, is the test; not
	// how fast a loaded machine lists 2,000 manifests under -race.
	defer func(d time.Duration) { listingAnswer = d }(listingAnswer)
	listingAnswer = 20 * time.Second
	dir, stateDir, s, c := fixture(t, 2000, nil)
	abs, _ := filepath.Abs(dir)
	req := fmt.Sprintf(`{"protocol":%d,"spool":%q}`, Protocol, abs)
	for range 30 {
		conn, err := net.Dial("unix", filepath.Join(stateDir, Socket))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, req)
		_ = conn.Close()
	}
	if _, ok := Ask(stateDir, dir, Query{}); !ok {
		t.Errorf("a client after thirty that gave up was not served")
	}
	s.Close()
	// The one asking, and at most one that gave up after its listing
	// had started.
	if got := c.served.Load(); got > 2 {
		t.Errorf("%d listings made for 30 clients gone and one waiting", got)
	}
}

// fakeSocket listens on the listing socket of stateDir and answers every
// request with answer.
func fakeSocket(t *testing.T, stateDir string, answer func(c net.Conn)) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(stateDir, Socket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Read(make([]byte, 4096))
				answer(c)
			}()
		}
	}()
}

// A client takes nothing on trust from what answers on the socket: a
// count out of bounds, another protocol, a reply cut short, a bad line,
// more lines than announced, or one that stalls after its header (a
// controller stopped mid-way) leave it to read the spool itself, within
// about listingAnswer. A listing that comes in pieces, each in time, is
// taken.
func TestClientTakesNothingOnTrust(t *testing.T) {
	line := func(name string) string {
		return fmt.Sprintf("%q\trow\t\"\"\t%q\t\"p\"\t\"Done\"\t1\t2\t3\t4\t0\t0\t-\t-\t0\t0\n", name+".yaml", name)
	}
	head := func(files int) string { return fmt.Sprintf(`{"protocol":%d,"files":%d}`+"\n", Protocol, files) }
	for _, c := range []struct {
		what   string
		answer string
		stall  bool
	}{
		{"an absurd count", fmt.Sprintf(`{"protocol":%d,"files":9223372036854775807}`+"\n", Protocol), false},
		{"a count past the bound", head(maxReplyFiles + 1), false},
		{"a negative count", head(-1), false},
		{"another protocol", `{"protocol":1,"files":1}` + "\n" + line("a"), false},
		{"a reply cut short", head(2) + line("a"), false},
		{"a bad line", head(1) + "\"a.yaml\"\tweird\n", false},
		{"a path in a name", head(1) + strings.Replace(line("a"), `"a.yaml"`, `"../a.yaml"`, 1), false},
		{"more than announced", head(1) + line("a") + line("b"), false},
		{"a reply that stalls", head(2) + line("a"), true},
	} {
		stateDir := t.TempDir()
		fakeSocket(t, stateDir, func(conn net.Conn) {
			_, _ = io.WriteString(conn, c.answer)
			if c.stall {
				time.Sleep(2 * listingDeadline)
			}
		})
		start := time.Now()
		if files, ok := Ask(stateDir, "/spool", Query{}); ok || files != nil {
			t.Errorf("%s: taken (%+v)", c.what, files)
		}
		if took := time.Since(start); took > 2*listingAnswer {
			t.Errorf("%s: the client waited %v", c.what, took)
		}
	}
	stateDir := t.TempDir()
	var body strings.Builder
	for i := range 400 {
		body.WriteString(line(fmt.Sprintf("t%03d", i)))
	}
	fakeSocket(t, stateDir, func(conn net.Conn) {
		_, _ = io.WriteString(conn, head(400))
		b := body.String()
		for i := 0; i < len(b); i += len(b) / 4 {
			time.Sleep(listingAnswer / 3)
			_, _ = io.WriteString(conn, b[i:min(len(b), i+len(b)/4)])
		}
	})
	if files, ok := Ask(stateDir, "/spool", Query{}); !ok || len(files) != 400 || files[399].Path != "/spool/t399.yaml" {
		t.Errorf("a listing that came in pieces over %v not taken (%d files)", 4*listingAnswer/3, len(files))
	}
}

// A socket left by a killed controller (nobody listens), or a file that
// is not a socket where the socket would be: nothing is served, and a
// server does not take the place of the file.
func TestAskAroundADeadSocket(t *testing.T) {
	stateDir := t.TempDir()
	path := filepath.Join(stateDir, Socket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	_ = ln.Close()
	if _, ok := Ask(stateDir, "/spool", Query{}); ok {
		t.Fatal("a dead socket answered")
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := Ask(stateDir, "/spool", Query{}); ok {
		t.Fatal("a regular file answered")
	}
	if _, err := Serve(stateDir, testSpool(t.TempDir()), nil, zerolog.Nop(), nil); err == nil {
		t.Errorf("a listing socket was made in place of a regular file")
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "not a socket" {
		t.Errorf("the file in the socket's place: %q %v", data, err)
	}
}

// Out of file descriptors for a moment (as when many clients connect at
// once), the server does not stop serving: once descriptors are free
// again, a client is served.
func TestServerSurvivesRunningOutOfDescriptors(t *testing.T) {
	dir, stateDir, _, _ := fixture(t, 3, nil)
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(len(fds) + 10)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for range 40 {
		c, err := net.Dial("unix", filepath.Join(stateDir, Socket))
		if err != nil {
			break
		}
		conns = append(conns, c)
	}
	time.Sleep(100 * time.Millisecond) // the server's accepts fail meanwhile
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		_ = c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := Ask(stateDir, dir, Query{}); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("not served again once descriptors were free")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
