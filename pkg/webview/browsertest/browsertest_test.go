package browsertest

import (
	"bytes"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// pages are the documents of the test server, by path.
var pages = map[string]string{
	"/clean": `<!doctype html><title>clean</title>
<p id="out">loading</p>
<script src="/app.js"></script>`,
	"/console-error": `<!doctype html><script>console.error("x")</script>`,
	"/throws":        `<!doctype html><script>throw new Error("boom")</script>`,
	"/rejects":       `<!doctype html><script>Promise.reject(new Error("nope"))</script>`,
	"/missing-script": `<!doctype html><title>missing</title>
<script src="/missing.js"></script>`,
	"/click": `<!doctype html>
<button id="b" onclick="this.dataset.n = +(this.dataset.n || 0) + 1">click</button>`,
	"/tall": `<!doctype html><style>body { margin: 0 } div { height: 2000px;
background: linear-gradient(#fff, #36c) }</style><div>tall page</div>`,
	"/csp": `<!doctype html><script>document.title = "inline ran"</script>`,
}

// server serves pages, a script and a small JSON API, and nothing else.
func server(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		// Page JS that fetches the API and computes with the answer.
		fmt.Fprint(w, `
async function summary() {
  const r = await fetch("/api/numbers");
  const numbers = await r.json();
  return {count: numbers.length, sum: numbers.reduce((a, b) => a + b, 0)};
}
summary().then(s => { document.getElementById("out").textContent = "sum " + s.sum; });
`)
	})
	mux.HandleFunc("/api/numbers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `[4, 8, 15, 16, 23, 42]`)
	})
	for path, body := range pages {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if path == "/csp" {
				w.Header().Set("Content-Security-Policy", "script-src 'self'")
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, body)
		})
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestBrowser(t *testing.T) {
	start := time.Now()
	b := Start(t)
	t.Logf("browser started in %v", time.Since(start).Round(time.Millisecond))
	s := server(t)

	t.Run("clean page has no errors", func(t *testing.T) {
		p := b.Open(t, s.URL+"/clean")
		p.WaitFor(t, `document.getElementById("out").textContent === "sum 108"`, 10*time.Second)
		if errs := p.Errors(); len(errs) != 0 {
			t.Errorf("Errors() = %q, want none", errs)
		}
	})

	// Each of these pages does one thing wrong, and Errors reports it.
	for _, tc := range []struct {
		path string
		want []string // substrings of one error line
	}{
		{"/console-error", []string{"console.error: x"}},
		{"/throws", []string{"exception:", "Error: boom", "/throws:1:"}},
		{"/rejects", []string{"exception:", "Error: nope"}},
		{"/missing-script", []string{"http 404", s.URL + "/missing.js"}},
		{"/csp", []string{"Content Security Policy"}},
		{"/no-such-page", []string{"http 404", s.URL + "/no-such-page"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			p := b.Open(t, s.URL+tc.path)
			// An unhandled rejection is reported once the microtasks have
			// run, which is before the load event; nothing here is late.
			errs := p.Errors()
			if !hasLine(errs, tc.want...) {
				t.Errorf("Errors() = %q, want a line with all of %q", errs, tc.want)
			}
			t.Logf("Errors() = %q", errs)
		})
	}

	t.Run("failed request", func(t *testing.T) {
		closed := httptest.NewServer(http.NotFoundHandler())
		closed.Close() // nothing listens there any more
		p := b.Open(t, s.URL+"/click")
		p.Eval(t, fmt.Sprintf(`new Promise(done => {
			const img = new Image();
			img.onload = img.onerror = () => done(true);
			img.src = %q;
		})`, closed.URL+"/x.png"), nil)
		errs := p.Errors()
		if !hasLine(errs, "request failed: GET "+closed.URL+"/x.png", "net::ERR_CONNECTION_REFUSED") {
			t.Errorf("Errors() = %q, want the refused connection", errs)
		}
	})

	t.Run("eval after fetch", func(t *testing.T) {
		p := b.Open(t, s.URL+"/clean")
		var got struct{ Count, Sum int }
		p.Eval(t, `summary()`, &got)
		if got.Count != 6 || got.Sum != 108 {
			t.Errorf("summary() = %+v, want count 6, sum 108", got)
		}
		var title string
		p.Eval(t, `document.title`, &title)
		if title != "clean" {
			t.Errorf("document.title = %q, want clean", title)
		}
		if errs := p.Errors(); len(errs) != 0 {
			t.Errorf("Errors() = %q, want none", errs)
		}
	})

	t.Run("click", func(t *testing.T) {
		p := b.Open(t, s.URL+"/click")
		p.Click(t, "#b")
		p.Click(t, "button")
		var n string
		p.Eval(t, `document.getElementById("b").dataset.n`, &n)
		if n != "2" {
			t.Errorf("clicks counted = %q, want 2", n)
		}
	})

	t.Run("viewport", func(t *testing.T) {
		p := b.Open(t, s.URL+"/click")
		var got [3]float64
		p.Eval(t, `[innerWidth, innerHeight, devicePixelRatio]`, &got)
		if want := [3]float64{windowWidth, windowHeight, 1}; got != want {
			t.Errorf("[innerWidth, innerHeight, devicePixelRatio] = %v, want %v", got, want)
		}
	})

	t.Run("screenshot", func(t *testing.T) {
		p := b.Open(t, s.URL+"/tall")
		path := filepath.Join(t.TempDir(), "new", "dir", "tall.png")
		p.Screenshot(t, path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("%s does not start with the PNG magic: % x", path, data[:min(8, len(data))])
		}
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		// The whole page, not only the 1400x1000 viewport, and drawn to
		// its end: the gradient is white at the top and blue at the bottom.
		if size := img.Bounds().Size(); size.X != windowWidth || size.Y != 2000 {
			t.Errorf("screenshot is %v, want %dx2000", size, windowWidth)
		}
		if r, _, b, _ := img.At(700, 1990).RGBA(); b <= r {
			t.Errorf("pixel (700, 1990) is %v, want the blue end of the gradient", img.At(700, 1990))
		}
	})

	t.Run("WaitFor fails with the last exception", func(t *testing.T) {
		p := b.Open(t, s.URL+"/click")
		msg := fatalMessage(func(t testing.TB) {
			p.WaitFor(t, `window.notThere.x`, 300*time.Millisecond)
		})
		for _, want := range []string{"waited", "window.notThere.x", "TypeError"} {
			if !strings.Contains(msg, want) {
				t.Errorf("failure message %q does not mention %q", msg, want)
			}
		}
	})

	t.Run("Eval fails on an exception", func(t *testing.T) {
		p := b.Open(t, s.URL+"/click")
		msg := fatalMessage(func(t testing.TB) {
			p.Eval(t, `Promise.reject(new Error("bad"))`, nil)
		})
		if !strings.Contains(msg, "bad") {
			t.Errorf("failure message %q does not mention the rejection", msg)
		}
	})
}

func TestStartWithoutBrowserFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	msg := fatalMessage(func(t testing.TB) { Start(t) })
	if !strings.Contains(msg, "install Debian's chromium") {
		t.Errorf("failure message %q does not say to install chromium", msg)
	}
}

// hasLine reports whether one of lines contains every one of subs.
func hasLine(lines []string, subs ...string) bool {
	for _, l := range lines {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			return true
		}
	}
	return false
}

// fatalTB is a testing.TB whose Fatalf records the message and ends the
// goroutine, as the real one does; it never fails the real test.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// fatalMessage runs fn on its own goroutine and returns the message of the
// Fatalf that fn must call.
func fatalMessage(fn func(testing.TB)) string {
	var wg sync.WaitGroup
	f := &fatalTB{}
	wg.Go(func() { fn(f) })
	wg.Wait()
	return f.msg
}
