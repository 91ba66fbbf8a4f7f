package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/metrics"
	"github.com/lardon3d/lardon3d-controller/pkg/webview"
)

// httpOptions are run's HTTP flags.
type httpOptions struct {
	// metricsAddr serves /metrics, /healthz, /readyz (and the view when
	// viewAddr is empty); viewAddr the web view alone.
	metricsAddr, viewAddr string
	pprof                 bool
	// viewInterval is how often the view samples the machine.
	viewInterval time.Duration
}

// viewListenAddr is where --http-addr listens: a port alone (":9465")
// means the loopback interface, not every interface, since the view
// shows the machine's tasks and logs.
func viewListenAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

// serveHTTP starts the HTTP servers run's flags ask for: the metrics (with
// the web view beside them unless it has its own address) and the web
// view, whose recorder then samples src and keeps its series in
// machineDir (the learned history's directory). stop closes them and
// saves the series.
func serveHTTP(o httpOptions, m *metrics.Metrics, src webview.Source, machineDir string, log zerolog.Logger) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	listen := func(flag, addr, what string, h http.Handler) error {
		closeIt, err := serveOn(flag, addr, what, h, log)
		if err == nil {
			stops = append(stops, closeIt)
		}
		return err
	}
	var view http.Handler
	if o.metricsAddr != "" || o.viewAddr != "" {
		rec := webview.NewRecorder(src, filepath.Join(machineDir, webview.SeriesFile), o.viewInterval, log)
		rec.Load(time.Now())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); rec.Run(ctx) }()
		stops = append(stops, func() { cancel(); <-done })
		view = webview.New(src, rec)
	}
	if o.metricsAddr != "" {
		h := m.Handler(o.pprof)
		if o.viewAddr == "" {
			mux := http.NewServeMux()
			for _, p := range []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/"} {
				mux.Handle(p, h)
			}
			mux.Handle("/", view)
			h = mux
		}
		if err := listen("--metrics-addr", o.metricsAddr, "metrics", h); err != nil {
			return nil, err
		}
	}
	if o.viewAddr != "" {
		if err := listen("--http-addr", viewListenAddr(o.viewAddr), "web view", view); err != nil {
			return nil, err
		}
	}
	return stop, nil
}

// serveOn serves h on addr (the value of flag) until closeIt is called,
// logging "serving WHAT" with the address it listens on.
func serveOn(flag, addr, what string, h http.Handler, log zerolog.Logger) (closeIt func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg(what + " server stopped")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("serving " + what)
	return func() { _ = srv.Close() }, nil
}
