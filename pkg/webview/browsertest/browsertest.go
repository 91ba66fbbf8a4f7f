package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Time limits. Chromium starts in about a second on an idle 2-core machine;
// the limits leave room for a machine that is loaded, or that runs the tests
// under the race detector.
const (
	startTimeout  = 60 * time.Second // start the browser
	openTimeout   = 60 * time.Second // open a tab and load its page
	actionTimeout = 30 * time.Second // one Eval, Click or Screenshot
	closeTimeout  = 10 * time.Second // close the browser gracefully
	pollInterval  = 50 * time.Millisecond
)

// browserNames are the programs Start looks for, in order, with exec.LookPath.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome"}

// Size of the browser's window, and of each page's viewport, in CSS pixels
// (at a device scale factor of 1).
const (
	windowWidth  = 1400
	windowHeight = 1000
)

// Browser is one headless Chromium that Start started for a test. Its Open
// method is safe to call from parallel subtests.
type Browser struct {
	ctx    context.Context // the browser's chromedp context
	output *outputBuffer   // what the browser wrote to stdout and stderr
}

// Start starts a headless Chromium for the test t and stops it when t ends.
// It fails t when no browser is installed, or when the browser does not start.
func Start(t testing.TB) *Browser {
	t.Helper()
	path, err := findBrowser()
	if err != nil {
		t.Fatalf("browsertest: %v", err)
	}
	out := &outputBuffer{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), // the defaults already include headless
		chromedp.NoSandbox,      // the tests run as root, and Chromium's sandbox refuses root
		chromedp.DisableGPU,
		chromedp.WindowSize(windowWidth, windowHeight),
		chromedp.CombinedOutput(out),
	)
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)

	// The first Do starts the browser and ties it to ctx for good, so it
	// cannot take a context with a deadline: a timer cancels ctx instead.
	start := time.Now()
	timer := time.AfterFunc(startTimeout, cancel)
	err = chromedp.Do(ctx)
	if !timer.Stop() && err == nil {
		err = context.Canceled
	}
	if err != nil {
		cancel()
		allocCancel()
		t.Fatalf("browsertest: starting %s: %v (after %v; limit %v)\nbrowser output:\n%s",
			path, err, time.Since(start).Round(time.Millisecond), startTimeout, out)
	}

	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(ctx, closeTimeout)
		defer ccancel()
		if err := chromedp.Cancel(cctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("browsertest: closing the browser: %v", err)
		}
		cancel()
		allocCancel() // waits until the browser has exited and its profile is gone
	})
	return &Browser{ctx: ctx, output: out}
}

// findBrowser returns the path of the first of browserNames that is installed.
func findBrowser() (string, error) {
	for _, name := range browserNames {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("no browser found (looked for %s in PATH); "+
		"install Debian's chromium: apt-get install -y --no-install-recommends chromium fonts-dejavu-core",
		strings.Join(browserNames, ", "))
}

// Page is one tab of a Browser, opened by Browser.Open. Its methods are for
// the test's goroutine; Errors may be called from any goroutine.
type Page struct {
	ctx context.Context // the tab's chromedp context

	mu       sync.Mutex
	errors   []string
	requests map[network.RequestID]string // "METHOD URL" of the requests in flight
}

// Open opens url in a new tab and waits for the page's load event. From the
// start of the navigation to the end of t, the page records in Errors every
// console.error and failed console.assert, every uncaught exception or
// unhandled rejection (Runtime.exceptionThrown), every browser log entry of
// level error (such as a Content Security Policy violation or a script refused
// for its MIME type), every request that failed (Network.loadingFailed, except
// the ones the page or the browser canceled) and every response with an HTTP
// status of 400 or more. The browser's own request for /favicon.ico is left
// out: it comes after the load event, at a time of the browser's choosing.
// Events of cross-site iframes and of workers, which are other targets, are
// not recorded. The page's viewport is 1400x1000 CSS pixels, at a device scale
// factor of 1. Open fails t when the page does not load; an HTTP error status
// of the page itself is recorded, not fatal. The tab closes when t ends.
func (b *Browser) Open(t testing.TB, url string) *Page {
	t.Helper()
	p := &Page{requests: make(map[network.RequestID]string)}
	// The listener goes in before the tab attaches, so that it sees every
	// event; it runs on the tab's reading goroutine, in order, so whatever
	// happened before the load event is in Errors when Navigate returns.
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithListener(p.record))
	t.Cleanup(cancel)
	p.ctx = ctx

	// As in Start, the first Do ties the tab to ctx: a timer bounds it.
	start := time.Now()
	timer := time.AfterFunc(openTimeout, cancel)
	err := chromedp.Do(ctx,
		// The window is 1400x1000, but the headless browser's frame takes
		// some of it: fix the page's viewport, so that layouts and
		// screenshots do not depend on the browser's version.
		chromedp.EmulateViewport(windowWidth, windowHeight),
		chromedp.Navigate(url))
	if !timer.Stop() && err == nil {
		err = context.Canceled
	}
	if err != nil {
		t.Fatalf("browsertest: opening %s: %v (after %v; limit %v)\npage errors: %q\nbrowser output:\n%s",
			url, err, time.Since(start).Round(time.Millisecond), openTimeout, p.Errors(), b.output)
	}
	return p
}

// Errors returns what went wrong on the page so far, one line for each
// problem, in the order the browser reported them. It is empty for a page
// that loaded and ran cleanly.
func (p *Page) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...)
}

// Eval evaluates the JavaScript expression js in the page, waits for the
// promise it returns if it returns one, and decodes the result, as JSON, into
// out (a pointer, or nil to ignore the result). It fails t when js throws, the
// promise rejects, or the result does not decode into out. To run statements,
// wrap them in a function: (async () => { ...; return x })().
func (p *Page) Eval(t testing.TB, js string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, actionTimeout)
	defer cancel()
	obj, err := chromedp.Run(ctx, chromedp.Evaluate[*runtime.RemoteObject](js,
		chromedp.EvalAwaitPromise, chromedp.EvalAsValue))
	if err != nil {
		t.Fatalf("browsertest: eval %s: %v", js, err)
	}
	if out == nil {
		return
	}
	if obj.Value == nil {
		t.Fatalf("browsertest: eval %s: the result (%s %s) has no JSON value",
			js, obj.Type, obj.UnserializableValue)
	}
	if err := json.Unmarshal(obj.Value, out); err != nil {
		t.Fatalf("browsertest: eval %s: decoding %s into %T: %v", js, obj.Value, out, err)
	}
}

// WaitFor evaluates the JavaScript expression js every 50 ms until its value
// (or the value of the promise it returns) is truthy, and fails t when that
// does not happen within timeout. An exception in js counts as false, so js
// may refer to things that do not exist yet; the last exception is in the
// failure message, with Errors.
func (p *Page) WaitFor(t testing.TB, js string, timeout time.Duration) {
	t.Helper()
	expr := "Promise.resolve((\n" + js + "\n)).then(v => !!v)"
	start := time.Now()
	deadline := start.Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithDeadline(p.ctx, deadline)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr, chromedp.EvalAwaitPromise))
		cancel()
		switch {
		case err == nil && ok:
			return
		case err == nil:
			last = "false"
		case p.ctx.Err() != nil:
			t.Fatalf("browsertest: waiting for %s: the tab is gone: %v", js, err)
		case !errors.Is(err, context.DeadlineExceeded):
			last = err.Error()
		}
		if time.Now().Add(pollInterval).After(deadline) {
			t.Fatalf("browsertest: waited %v for %s; last result: %s\npage errors: %q",
				time.Since(start).Round(time.Millisecond), js, last, p.Errors())
		}
		time.Sleep(pollInterval)
	}
}

// Click waits until an element that matches the CSS selector is visible,
// and clicks its center with the mouse. It fails t when no such element
// becomes visible in time.
func (p *Page) Click(t testing.TB, selector string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		t.Fatalf("browsertest: click %s: %v (limit %v)\npage errors: %q", selector, err, actionTimeout, p.Errors())
	}
}

// Screenshot writes a PNG of the whole page, beyond the window if the page is
// larger, to path, and creates the directories of path as needed.
func (p *Page) Screenshot(t testing.TB, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, func(ctx context.Context, tab *chromedp.Target) ([]byte, error) {
		m, err := cdp.Call(ctx, tab, page.GetLayoutMetrics, cdp.Empty{})
		if err != nil {
			return nil, err
		}
		w, h := float64(windowWidth), float64(windowHeight)
		if v := m.CSSLayoutViewport; v != nil {
			w, h = float64(v.ClientWidth), float64(v.ClientHeight)
		}
		if s := m.CSSContentSize; s != nil {
			w, h = max(w, math.Ceil(s.Width)), max(h, math.Ceil(s.Height))
		}
		r, err := cdp.Call(ctx, tab, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format:                page.CaptureScreenshotFormatPng,
			Clip:                  &page.Viewport{Width: w, Height: h, Scale: 1},
			FromSurface:           new(true),
			CaptureBeyondViewport: new(true),
		})
		return r.Data, err
	})
	if err != nil {
		t.Fatalf("browsertest: screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatalf("browsertest: screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatalf("browsertest: screenshot: %v", err)
	}
}

// record is the tab's event listener. It runs on the goroutine that reads
// the tab's messages, so it must be quick and must not send commands.
func (p *Page) record(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			texts := make([]string, len(ev.Args))
			for i, a := range ev.Args {
				texts[i] = objectText(a)
			}
			p.add("console.%s: %s%s", ev.Type, strings.Join(texts, " "), stackPlace(ev.StackTrace))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil {
			// The first line of an Error's description; the rest is its stack.
			text += " " + strings.SplitN(objectText(d.Exception), "\n", 2)[0]
		}
		p.add("exception: %s (%s:%d:%d)", text, d.URL, d.LineNumber+1, d.ColumnNumber+1)
	case *log.EventEntryAdded:
		// Network entries repeat what the network events below report.
		if e := ev.Entry; e.Level == log.EntryLevelError && e.Source != log.EntrySourceNetwork {
			p.add("log (%s): %s%s", e.Source, e.Text, place(e.URL, e.LineNumber+1))
		}
	case *network.EventRequestWillBeSent:
		p.requests[ev.RequestID] = ev.Request.Method + " " + ev.Request.URL
	case *network.EventResponseReceived:
		if r := ev.Response; r.Status >= 400 && !isFavicon(r.URL) {
			p.add("http %d %s: %s", r.Status, r.StatusText, r.URL)
		}
	case *network.EventLoadingFinished:
		delete(p.requests, ev.RequestID)
	case *network.EventLoadingFailed:
		req := p.requests[ev.RequestID]
		delete(p.requests, ev.RequestID)
		if ev.Canceled || isFavicon(strings.TrimPrefix(req, "GET ")) {
			// A request that the page aborted, or that the tab dropped when
			// it navigated or closed, is no failure of the page.
			break
		}
		why := ev.ErrorText
		if ev.BlockedReason != "" {
			why += " (blocked: " + string(ev.BlockedReason) + ")"
		}
		if ev.CorsErrorStatus != nil {
			why += " (CORS: " + string(ev.CorsErrorStatus.CorsError) + ")"
		}
		p.add("request failed: %s: %s", req, why)
	}
}

// isFavicon reports whether rawURL is the /favicon.ico that the browser
// itself asks for, after the load event and at a time of its choosing, when
// the page names no icon. Its failure is not the page's, and recording it
// would make Errors depend on timing.
func isFavicon(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Path == "/favicon.ico"
}

// add records one error; p.mu is held.
func (p *Page) add(format string, args ...any) {
	p.errors = append(p.errors, fmt.Sprintf(format, args...))
}

// objectText is how the DevTools console shows a value: a string as it is,
// anything else by its JSON value or its description.
func objectText(o *runtime.RemoteObject) string {
	switch {
	case o == nil:
		return ""
	case o.Type == runtime.RemoteObjectTypeString && o.Value != nil:
		var s string
		if json.Unmarshal(o.Value, &s) == nil {
			return s
		}
	case o.Description != "":
		return o.Description
	case o.Value != nil:
		return string(o.Value)
	case o.UnserializableValue != "":
		return string(o.UnserializableValue)
	}
	return string(o.Type)
}

// stackPlace is " (url:line:column)" of the top of st, or "".
func stackPlace(st *runtime.StackTrace) string {
	if st == nil || len(st.CallFrames) == 0 {
		return ""
	}
	f := st.CallFrames[0]
	return fmt.Sprintf(" (%s:%d:%d)", f.URL, f.LineNumber+1, f.ColumnNumber+1)
}

// place is " (url:line)", or "" when url is empty.
func place(url string, line int64) string {
	if url == "" {
		return ""
	}
	return fmt.Sprintf(" (%s:%d)", url, line)
}

// outputBuffer keeps the first 64 KiB that the browser writes, for the
// message of a failed start.
type outputBuffer struct {
	mu  sync.Mutex
	buf []byte
}

// Write keeps what fits and drops the rest; it never fails.
func (b *outputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	const limit = 64 << 10
	if room := limit - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// String returns what the browser wrote so far.
func (b *outputBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
