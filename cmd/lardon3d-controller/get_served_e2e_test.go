package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lardon3d/lardon3d-controller/pkg/listing"
)

// localListing is what get prints for args and o reading the spool's
// files itself, as when no controller answers.
func localListing(t *testing.T, spool string, args []string, o *getOptions) (string, error) {
	t.Helper()
	sel, err := o.check(args)
	if err != nil {
		t.Fatal(err)
	}
	l, err := listTasks(spool, filepath.Join(t.TempDir(), "no-controller"), args, sel, o)
	if err != nil {
		return "", err
	}
	if o.output == "wide" {
		// The ETA of -o wide reads the estimates the controller publishes.
		l.learned = learnedEstimates(filepath.Join(spool, stateDirName), testHistoryPath(spool))
	}
	return showFiles(&tablePrinter{padding: 3}, l, o, len(args) == 1, time.Now())
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

// metricsAddr is the address a controller started with --metrics-addr
// 127.0.0.1:0 logged.
func metricsAddr(t *testing.T, c *controller) string {
	t.Helper()
	var addr string
	eventually(t, 10*time.Second, "the metrics address in the log", func() bool {
		addr = loggedAddr(c.stderr.String(), "serving metrics")
		return addr != ""
	})
	return addr
}

// allDoneServed waits until the controller running on spool, with state
// directory stateDir, serves every valid task t00..t11 of writeVariedSpool
// as Done.
func allDoneServed(t *testing.T, spool, stateDir string) {
	t.Helper()
	eventually(t, time.Minute, "every valid task Done, served", func() bool {
		files, ok := listing.Ask(stateDir, spool, listing.Query{})
		if !ok {
			return false
		}
		done := 0
		for _, f := range files {
			if strings.HasPrefix(f.Name(), "t") && f.Phase() == "Done" {
				done++
			}
		}
		return done == 12
	})
}

// TestGetIsServedByTheRunningController: while a controller runs, get's
// table, wide table and names (every order, with and without headers,
// with a label selector, of one task) are listed by the controller, and
// print what get prints reading the spool itself; what is not a listing
// (no such task, -o json) get does itself, in its own words; a controller
// that is stopped (it accepts the connection and never answers) is read
// around.
func TestGetIsServedByTheRunningController(t *testing.T) {
	spool := newSpool(t)
	writeVariedSpool(t, spool)
	c := startController(t, spool, "--metrics-addr", "127.0.0.1:0")
	allDoneServed(t, spool, filepath.Join(spool, stateDirName))
	addr := metricsAddr(t, c)

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
		listed{o: getOptions{sortBy: "queue"}, args: []string{"t03"}}, listed{o: getOptions{sortBy: "name"}, args: []string{"t05", "t03"}}, listed{o: getOptions{output: "name", sortBy: "queue"}, args: []string{"task/t05"}})
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
	out, code := runCLI(t, "get", "--spool", spool)
	if code != 0 || !strings.Contains(out, "broken") || !strings.Contains(out, "Invalid") || !strings.Contains(out, "Rejected") || !strings.Contains(out, "t11") {
		t.Errorf("get (exit %d):\n%s", code, out)
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
	before := listingsServed(t, addr, "served") + listingsServed(t, addr, "declined")
	if out, code := runCLI(t, "get", "--spool", spool, "-o", "json"); code != 0 || !strings.Contains(out, `"items"`) {
		t.Errorf("get -o json (exit %d): %s", code, out)
	}
	if got := listingsServed(t, addr, "served") + listingsServed(t, addr, "declined"); got != before {
		t.Errorf("get -o json asked the controller (%d answers, %d before)", got, before)
	}

	// Stopped, it accepts the connection and never answers: get lists
	// the spool itself once the answer's deadline has passed; an edit
	// made meanwhile shows.
	freezeController(t, c)
	defer func() { _ = c.cmd.Process.Signal(syscall.SIGCONT) }()
	writeManifest(t, spool, "t03.yaml", "apiVersion: lardon3d.io/v1alpha1\nkind: Task\nmetadata:\n  name: t03\n  labels: {n: edited}\nspec:\n  command: [\"true\"]\n  items: {count: 2}\n")
	want, err := localListing(t, spool, nil, &getOptions{sortBy: "queue"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, code = runCLI(t, "get", "--spool", spool)
	if code != 0 || !sameButAge(out, want) || !regexp.MustCompile(`\nt03\s+New\s`).MatchString(out) {
		t.Errorf("get with the controller stopped (exit %d):\n%s\nwant:\n%s", code, out, want)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("get waited %v for a stopped controller", took)
	}
}

// sameButAge reports whether two tables differ in their AGE cells alone
// (a second may tick between them).
func sameButAge(a, b string) bool {
	age := regexp.MustCompile(`\b\d+(s|m|h|d)(\d+s|\d+m)?\b`)
	norm := func(s string) string { return strings.Join(strings.Fields(age.ReplaceAllString(s, "AGE")), " ") }
	return norm(a) == norm(b)
}

// get -w prints, after the first table, rows whose cells are wider than
// the first table's: every column of the rows printed before stays in
// line with them, as the remembered widths say (tablePrinter).
func TestWatchRowsKeepTheColumnsWidths(t *testing.T) {
	p := &tablePrinter{padding: 3}
	first := p.lay([]string{"NAME\tPHASE\tAGE", "a\tNew\t-"})
	if first != "NAME   PHASE   AGE\na      New     -\n" {
		t.Fatalf("first table %q", first)
	}
	// A narrower row keeps the first table's widths.
	if got := p.lay([]string{"b\tDone\t1s"}); got != "b      Done    1s\n" {
		t.Errorf("a narrow row: %q", got)
	}
	// A wider one widens its column, for it and what comes after.
	if got := p.lay([]string{"a-much-longer-name\tRunning\t2s"}); got != "a-much-longer-name   Running   2s\n" {
		t.Errorf("a wide row: %q", got)
	}
	if got := p.lay([]string{"c\tNew\t-"}); got != "c                    New       -\n" {
		t.Errorf("a row after the wide one: %q", got)
	}
	// A table no printer lays out itself (ragged) goes through tabwriter.
	if got := p.lay([]string{"x\ty", "z"}); got != alignColumns([]string{"x\ty", "z"}, 3) {
		t.Errorf("a ragged table: %q", got)
	}
}
