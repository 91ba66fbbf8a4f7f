package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/apis/v1alpha1"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// localListing is what get prints for args and o reading the spool
// itself (the controller's index and the files), as when no controller
// answers.
func localListing(t *testing.T, spool string, args []string, o *getOptions) (string, error) {
	t.Helper()
	sel, err := o.check()
	if err != nil {
		t.Fatal(err)
	}
	files, err := listTasks(spool, nil, args, sel, o)
	if err != nil {
		return "", err
	}
	return showFiles(files, o, len(args) == 1, time.Now())
}

// listingsServed is the controller's count of get's listings by result,
// read from its /metrics.
func listingsServed(t *testing.T, addr, result string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`lardon3d_get_listing_duration_seconds_count\{result="` + result + `"\} (\d+)`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestGetIsServedByTheRunningController: while a controller runs, get's
// table, wide table and names (every order, with and without headers,
// with a label selector, of one task) are made by the controller, and are
// what get makes reading the spool itself; what is not a listing (no such
// task, -o json) get does itself, in its own words; a controller that is
// stopped is read around.
func TestGetIsServedByTheRunningController(t *testing.T) {
	spool := newSpool(t)
	writeVariedSpool(t, spool)
	c := startController(t, spool, "--metrics-addr", "127.0.0.1:0")
	stateDir := filepath.Join(spool, ".lardon3d")
	eventually(t, time.Minute, "every valid task Done in the index", func() bool {
		idx, err := reconcile.ReadIndex(stateDir, spool)
		if err != nil {
			return false
		}
		for i := range 12 {
			if row := idx[fmt.Sprintf("t%02d.yaml", i)]; row == nil || row.Row.Phase != v1alpha1.PhaseDone {
				return false
			}
		}
		return true
	})
	var addr string
	eventually(t, 10*time.Second, "the metrics address in the log", func() bool {
		m := regexp.MustCompile(`"addr":"([0-9.:]+)"`).FindStringSubmatch(c.stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})

	// The command, with every output, order and header choice, a label
	// selector and a task named: served (the controller counts each),
	// and what get prints reading the spool itself.
	type listed struct {
		o    getOptions
		sel  string
		args []string
	}
	var cases []listed
	for _, o := range listOptions() {
		cases = append(cases, listed{o: o})
	}
	cases = append(cases, listed{o: getOptions{sortBy: "name"}, sel: "n=1"}, listed{o: getOptions{output: "wide", sortBy: "queue"}, sel: "n!=1"},
		listed{o: getOptions{sortBy: "queue"}, args: []string{"t03"}}, listed{o: getOptions{output: "name", sortBy: "queue"}, args: []string{"task/t05"}})
	for _, c := range cases {
		cli := []string{"get", "--spool", spool, "--sort-by", c.o.sortBy}
		if c.o.output != "" {
			cli = append(cli, "-o", c.o.output)
		}
		if c.o.noHeaders {
			cli = append(cli, "--no-headers")
		}
		if c.sel != "" {
			cli = append(cli, "-l", c.sel)
		}
		cli = append(cli, c.args...)
		o := c.o
		o.selector = c.sel
		before := listingsServed(t, addr, "served")
		// AGE may tick between the two listings: the same within a few
		// tries.
		eventually(t, 10*time.Second, fmt.Sprintf("%v served as listed", cli), func() bool {
			out, code := runCLI(t, cli...)
			local, err := localListing(t, spool, c.args, &o)
			if err != nil || code != 0 {
				t.Fatalf("%v (exit %d): %v\n%s", cli, code, err, out)
			}
			if out != local {
				t.Logf("%v served:\n%s\nlisted:\n%s", cli, out, local)
			}
			return out == local
		})
		if got := listingsServed(t, addr, "served"); got <= before {
			t.Errorf("%v: not served (%d listings served before, %d after)", cli, before, got)
		}
	}

	// Not a listing: declined, and get says it in its own words.
	declined := listingsServed(t, addr, "declined")
	out, code := runCLI(t, "get", "--spool", spool, "nosuch")
	if code != 1 || !strings.Contains(out, fmt.Sprintf("no task %q in %s", "nosuch", spool)) {
		t.Errorf("get nosuch (exit %d): %s", code, out)
	}
	if got := listingsServed(t, addr, "declined"); got != declined+1 {
		t.Errorf("listings declined: %d before get nosuch, %d after", declined, got)
	}
	// JSON is read from the files: not asked.
	before := listingsServed(t, addr, "served") + listingsServed(t, addr, "declined")
	if out, code := runCLI(t, "get", "--spool", spool, "-o", "json"); code != 0 || !strings.Contains(out, `"items"`) {
		t.Errorf("get -o json (exit %d): %s", code, out)
	}
	if got := listingsServed(t, addr, "served") + listingsServed(t, addr, "declined"); got != before {
		t.Errorf("get -o json asked the controller (%d answers, %d before)", got, before)
	}

	// Stopped, it accepts the connection and never answers: get lists
	// the spool itself once listingAnswer has passed.
	want, err := localListing(t, spool, nil, &getOptions{sortBy: "queue"})
	if err != nil {
		t.Fatal(err)
	}
	freezeController(t, c)
	defer func() { _ = c.cmd.Process.Signal(syscall.SIGCONT) }()
	out, code = runCLI(t, "get", "--spool", spool)
	if code != 0 || !sameButAge(out, want) {
		t.Errorf("get with the controller stopped (exit %d):\n%s\nwant:\n%s", code, out, want)
	}
}

// sameButAge reports whether two tables differ in their AGE cells alone
// (a second may tick between them).
func sameButAge(a, b string) bool {
	age := regexp.MustCompile(`\b\d+(s|m|h|d)(\d+s|\d+m)?\b`)
	norm := func(s string) string { return strings.Join(strings.Fields(age.ReplaceAllString(s, "AGE")), " ") }
	return norm(a) == norm(b)
}

// A socket left by a killed controller (nobody listens), or a file that
// is not a socket where the socket would be: get reads the spool itself.
func TestGetReadsAroundADeadListingSocket(t *testing.T) {
	spool := newSpool(t)
	writeManifest(t, spool, "a.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 1}\n")
	stateDir := filepath.Join(spool, ".lardon3d")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(stateDir, ListingSocket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	_ = ln.Close()
	if st, err := os.Lstat(path); err != nil || st.Mode().Type() != os.ModeSocket {
		t.Fatalf("the dead socket: %v %v", st, err)
	}
	if listedByController(spool, nil, &getOptions{sortBy: "queue"}, io.Discard) {
		t.Fatal("a dead socket answered")
	}
	out, code := runCLI(t, "get", "--spool", spool)
	if code != 0 || !strings.Contains(out, "a ") {
		t.Errorf("get beside a dead socket (exit %d):\n%s", code, out)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = runCLI(t, "get", "--spool", spool)
	if code != 0 || !strings.Contains(out, "a ") {
		t.Errorf("get beside a file named %s (exit %d):\n%s", ListingSocket, code, out)
	}
	// A controller does not take it over either.
	if _, err := serveListings(stateDir, spool, nil, zerolog.Nop(), nil); err == nil {
		t.Errorf("a listing socket was made in place of a regular file")
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "not a socket" {
		t.Errorf("the file in the socket's place: %q %v", data, err)
	}
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

// The listing server answers its own user's get with the listing get
// would print, and declines, or closes unanswered, anything else: bad
// JSON, an unknown field, another protocol, another spool, an output
// that is not a listing, two names, a bad selector, another user; none of
// it stops it serving. A client that connects and sends nothing does not
// hold it open when it closes, and closed it removes its socket.
func TestListingServerAnswersOnlyItsOwnGet(t *testing.T) {
	spool, s, counts := listingFixture(t, 3)
	served, declined := &counts.served, &counts.declined
	abs, err := filepath.Abs(spool)
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(spool, ".lardon3d")
	path := filepath.Join(stateDir, ListingSocket)
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the socket: %v %v, want mode 0600", st, err)
	}
	listsAsGetWould := func(what string) {
		t.Helper()
		o := &getOptions{sortBy: "queue"}
		var got bytes.Buffer
		if !listedByController(spool, nil, o, &got) {
			t.Fatalf("after %s: not served", what)
		}
		want, err := localListing(t, spool, nil, o)
		if err != nil {
			t.Fatal(err)
		}
		if !sameButAge(got.String(), want) || !strings.Contains(got.String(), "t00002") {
			t.Errorf("after %s, served:\n%s\nwant:\n%s", what, got.String(), want)
		}
	}
	listsAsGetWould("nothing")

	binary, err := executableID("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	request := func(fields string) string {
		return fmt.Sprintf(`{"protocol":%d,"binary":%q,"spool":%q%s}`, listingProtocol, binary, abs, fields)
	}
	for _, c := range []struct {
		what, req string
		answered  bool
	}{
		{"bad JSON", `{"protocol":1,`, false},
		{"an unknown field", request(`,"columns":"all"`), false},
		{"another protocol", strings.Replace(request(""), fmt.Sprintf(`"protocol":%d`, listingProtocol), `"protocol":99`, 1), true},
		{"another spool", strings.Replace(request(""), strconv.Quote(abs), `"/elsewhere"`, 1), true},
		{"another binary", strings.Replace(request(""), strconv.Quote(binary), `"1:2:3:4"`, 1), true},
		{"-o json", request(`,"output":"json"`), true},
		{"an unknown output", request(`,"output":"watch"`), true},
		{"two names", request(`,"args":["t0","t1"]`), true},
		{"a bad selector", request(`,"selector":"a in ("`), true},
		{"no such task", request(`,"args":["nosuch"]`), true},
		{"a request larger than allowed", request(`,"selector":"` + strings.Repeat("a", maxListingRequest) + `"`), false},
	} {
		before := declined.Load()
		head := ask(t, path, c.req, !c.answered)
		var reply listingReply
		switch {
		case !c.answered && head != "":
			t.Errorf("%s: answered %s", c.what, head)
		case c.answered && (json.Unmarshal([]byte(head), &reply) != nil || reply.Declined == "" || reply.Size != 0):
			t.Errorf("%s: %q, want a declined reply", c.what, head)
		case c.answered && declined.Load() != before+1:
			t.Errorf("%s: %d declined before, %d after", c.what, before, declined.Load())
		}
		listsAsGetWould(c.what)
	}

	// A client that gave up (closed its connection) while its request
	// waited for another listing (the slot held here) is not listed for.
	before, declinedBefore := served.Load(), declined.Load()
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
	eventually(t, 10*time.Second, "the request of a client gone declined", func() bool { return declined.Load() > declinedBefore })
	if served.Load() != before {
		t.Errorf("a listing made for a client that had gone")
	}

	// Another user is not answered (the peer's credentials).
	s.uid.Store(int64(os.Geteuid() + 1))
	if listedByController(spool, nil, &getOptions{sortBy: "queue"}, io.Discard) {
		t.Errorf("another user's get was served")
	}
	s.uid.Store(int64(os.Geteuid()))
	listsAsGetWould("another user")

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
	if listedByController(spool, nil, &getOptions{sortBy: "queue"}, io.Discard) {
		t.Errorf("served after Close")
	}
	if served.Load() == 0 {
		t.Errorf("no listing counted as served")
	}
}

// listingCounts are a listing server's answers, by result.
type listingCounts struct{ served, declined atomic.Int64 }

// listingFixture is a listing server on a spool of n manifests, no
// controller running, and its counts of answers.
func listingFixture(t *testing.T, n int) (spool string, s *listingServer, counts *listingCounts) {
	t.Helper()
	spool = newSpool(t)
	for i := range n {
		writeManifest(t, spool, fmt.Sprintf("t%05d.yaml", i), "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 2}\n")
	}
	stateDir := filepath.Join(spool, ".lardon3d")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(spool)
	if err != nil {
		t.Fatal(err)
	}
	counts = &listingCounts{}
	s, err = serveListings(stateDir, abs, nil, zerolog.Nop(), func(_ time.Duration, ok bool) {
		if ok {
			counts.served.Add(1)
		} else {
			counts.declined.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return spool, s, counts
}

// Thirty gets that gave up (their client closed after asking) while a
// listing of 2,000 manifests was under way are not listed for: a get
// asking next is served at once, and the server closes without making
// them.
func TestListingServerSkipsWhatNobodyWaitsFor(t *testing.T) {
	// Served at all, and how many listings were made, is the test; not
	// how fast a loaded machine lists 2,000 manifests under -race.
	defer func(d time.Duration) { listingAnswer = d }(listingAnswer)
	listingAnswer = 20 * time.Second
	spool, s, counts := listingFixture(t, 2000)
	path := filepath.Join(spool, ".lardon3d", ListingSocket)
	abs, _ := filepath.Abs(spool)
	binary, err := executableID("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	req := fmt.Sprintf(`{"protocol":%d,"binary":%q,"spool":%q}`, listingProtocol, binary, abs)
	for range 30 {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, req)
		_ = c.Close()
	}
	if !listedByController(spool, nil, &getOptions{sortBy: "queue"}, io.Discard) {
		t.Errorf("a get after thirty that gave up was not served")
	}
	s.Close()
	// The one asking, and at most one that gave up after its listing
	// had started.
	if got := counts.served.Load(); got > 2 {
		t.Errorf("%d listings made for 30 clients gone and one waiting", got)
	}
}

// fakeListingSocket listens on spool's listing socket and answers every
// request with answer.
func fakeListingSocket(t *testing.T, spool string, answer func(c net.Conn)) {
	t.Helper()
	stateDir := filepath.Join(spool, ".lardon3d")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(stateDir, ListingSocket))
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

// get takes nothing on trust from what answers on the socket: a size out
// of bounds, a reply cut short, or one that stalls after its header (a
// controller stopped mid-way) leave it to read the spool itself, within
// about listingAnswer; control characters in a listing are escaped as in
// get's own.
func TestGetTakesNothingOnTrustFromTheSocket(t *testing.T) {
	for _, c := range []struct {
		what   string
		answer string
		stall  bool
	}{
		{"an absurd size", `{"size":9223372036854775807}` + "\n", false},
		{"a size past the bound", fmt.Sprintf(`{"size":%d}`+"\n", maxListingReply+1), false},
		{"a reply cut short", `{"size":100}` + "\nNAME  PHASE", false},
		{"a reply that stalls", `{"size":100}` + "\nNAME  PHASE", true},
	} {
		spool := newSpool(t)
		fakeListingSocket(t, spool, func(conn net.Conn) {
			_, _ = io.WriteString(conn, c.answer)
			if c.stall {
				time.Sleep(2 * listingDeadline)
			}
		})
		var out bytes.Buffer
		start := time.Now()
		if listedByController(spool, nil, &getOptions{sortBy: "queue"}, &out) || out.Len() != 0 {
			t.Errorf("%s: taken (%q)", c.what, out.String())
		}
		if took := time.Since(start); took > 2*listingAnswer {
			t.Errorf("%s: get waited %v", c.what, took)
		}
	}
	// A long listing that comes in pieces, each within listingAnswer,
	// over more than listingAnswer in all, is taken.
	spool := newSpool(t)
	body := strings.Repeat("t0 Done\n", 400)
	fakeListingSocket(t, spool, func(conn net.Conn) {
		_, _ = fmt.Fprintf(conn, `{"size":%d}`+"\n", len(body))
		for i := 0; i < len(body); i += len(body) / 4 {
			time.Sleep(listingAnswer / 3)
			_, _ = io.WriteString(conn, body[i:min(len(body), i+len(body)/4)])
		}
	})
	var slow bytes.Buffer
	if !listedByController(spool, nil, &getOptions{sortBy: "queue"}, &slow) || slow.String() != body {
		t.Errorf("a listing that came in pieces over %v not taken (%d bytes of %d)", 4*listingAnswer/3, slow.Len(), len(body))
	}

	spool = newSpool(t)
	evil := "NAME\n\x1b]0;owned\x07t1\n"
	fakeListingSocket(t, spool, func(conn net.Conn) {
		_, _ = fmt.Fprintf(conn, `{"size":%d}`+"\n%s", len(evil), evil)
	})
	var out bytes.Buffer
	if !listedByController(spool, nil, &getOptions{sortBy: "queue"}, &out) {
		t.Fatal("a well-formed reply not taken")
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("control characters from the socket reached the output: %q", out.String())
	}
}

// Out of file descriptors for a moment (as when many clients connect at
// once), the server does not stop serving: once descriptors are free
// again, get is served.
func TestListingServerSurvivesRunningOutOfDescriptors(t *testing.T) {
	spool, s, _ := listingFixture(t, 3)
	defer s.Close()
	path := filepath.Join(spool, ".lardon3d", ListingSocket)
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
		c, err := net.Dial("unix", path)
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
	eventually(t, 10*time.Second, "a get served again", func() bool {
		return listedByController(spool, nil, &getOptions{sortBy: "queue"}, io.Discard)
	})
}
