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
	files, err := listTasks(spool, args, sel, o)
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

	for _, o := range listOptions() {
		for _, sel := range []string{"", "n=1"} {
			for _, args := range [][]string{nil, {"t03"}, {"task/t05"}} {
				o := o
				o.selector = sel
				// AGE may tick between the two listings: the same within a
				// few tries.
				eventually(t, 10*time.Second, fmt.Sprintf("-o %q --sort-by %s -l %q %v served as listed", o.output, o.sortBy, sel, args), func() bool {
					var served bytes.Buffer
					if !listedByController(spool, args, &o, &served) {
						t.Fatalf("-o %q --sort-by %s -l %q %v: not served", o.output, o.sortBy, sel, args)
					}
					local, err := localListing(t, spool, args, &o)
					if err != nil {
						t.Fatal(err)
					}
					if served.String() != local {
						t.Logf("served:\n%s\nlisted:\n%s", served.String(), local)
					}
					return served.String() == local
				})
			}
		}
	}

	// The command: served (the controller counts it), and printed whole.
	before := listingsServed(t, addr, "served")
	out, code := runCLI(t, "get", "--spool", spool)
	if code != 0 || !strings.Contains(out, "broken") || !strings.Contains(out, "Invalid") || !strings.Contains(out, "t11") {
		t.Fatalf("get (exit %d):\n%s", code, out)
	}
	if got := listingsServed(t, addr, "served"); got != before+1 {
		t.Errorf("listings served: %d before get, %d after", before, got)
	}
	// Not a listing: declined, and get says it in its own words.
	declined := listingsServed(t, addr, "declined")
	out, code = runCLI(t, "get", "--spool", spool, "nosuch")
	if code != 1 || !strings.Contains(out, fmt.Sprintf("no task %q in %s", "nosuch", spool)) {
		t.Errorf("get nosuch (exit %d): %s", code, out)
	}
	if got := listingsServed(t, addr, "declined"); got != declined+1 {
		t.Errorf("listings declined: %d before get nosuch, %d after", declined, got)
	}
	// JSON is read from the files: not asked.
	before = listingsServed(t, addr, "served") + listingsServed(t, addr, "declined")
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
	if _, err := serveListings(stateDir, spool, zerolog.Nop(), nil); err == nil {
		t.Errorf("a listing socket was made in place of a regular file")
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "not a socket" {
		t.Errorf("the file in the socket's place: %q %v", data, err)
	}
}

// ask sends req as it is on a new connection to the socket at path and
// returns the reply's header, or "" when the connection was closed
// unanswered.
func ask(t *testing.T, path, req string) string {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return "" // closed before reading it all
	}
	_ = conn.(*net.UnixConn).CloseWrite()
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
	spool := newSpool(t)
	for i := range 3 {
		writeManifest(t, spool, fmt.Sprintf("t%d.yaml", i), "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nspec:\n  command: [\"true\"]\n  items: {count: 2}\n")
	}
	stateDir := filepath.Join(spool, ".lardon3d")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(spool)
	if err != nil {
		t.Fatal(err)
	}
	var served, declined atomic.Int64
	s, err := serveListings(stateDir, abs, zerolog.Nop(), func(_ time.Duration, ok bool) {
		if ok {
			served.Add(1)
		} else {
			declined.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
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
		if !sameButAge(got.String(), want) || !strings.Contains(got.String(), "t2") {
			t.Errorf("after %s, served:\n%s\nwant:\n%s", what, got.String(), want)
		}
	}
	listsAsGetWould("nothing")

	request := func(fields string) string {
		return fmt.Sprintf(`{"protocol":%d,"spool":%q%s}`, listingProtocol, abs, fields)
	}
	for _, c := range []struct {
		what, req string
		answered  bool
	}{
		{"bad JSON", `{"protocol":1,`, false},
		{"an unknown field", request(`,"columns":"all"`), false},
		{"another protocol", strings.Replace(request(""), fmt.Sprintf(`"protocol":%d`, listingProtocol), `"protocol":99`, 1), true},
		{"another spool", fmt.Sprintf(`{"protocol":%d,"spool":"/elsewhere"}`, listingProtocol), true},
		{"-o json", request(`,"output":"json"`), true},
		{"an unknown output", request(`,"output":"watch"`), true},
		{"two names", request(`,"args":["t0","t1"]`), true},
		{"a bad selector", request(`,"selector":"a in ("`), true},
		{"no such task", request(`,"args":["nosuch"]`), true},
		{"a request larger than allowed", request(`,"selector":"` + strings.Repeat("a", maxListingRequest) + `"`), false},
	} {
		before := declined.Load()
		head := ask(t, path, c.req)
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
