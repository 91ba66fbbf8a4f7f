package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
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
	// viewSocket is the view's unix socket, served whenever the view is
	// ("": none); admins see every spool there.
	viewSocket string
	admins     webview.Admins
}

// Bounds of every HTTP server of the controller: a client that sends
// slowly, or keeps a connection open sending nothing, loses it.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 30 * time.Second
	httpIdleTimeout       = 30 * time.Second
	// httpWriteTimeout bounds one answer (the view has no stream;
	// /debug/pprof/profile's default 30 s fits).
	httpWriteTimeout = 2 * time.Minute
)

// TokenFile is the TCP web view's token, in the machine's state
// directory (beside the learned history), readable by the controller's
// user alone; it changes at each start.
const TokenFile = "view-token"

// listenAddr is where --http-addr and --metrics-addr listen: a port alone
// (":9465") means the loopback interface, not every interface, since the
// view shows the machine's tasks and logs (give 0.0.0.0:9465 for every
// interface).
func listenAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}

// serveHTTP starts the HTTP servers run's flags ask for: the metrics (with
// the web view beside them unless it has its own address), the web view,
// and, with the view, its unix socket; the view's recorder then samples
// src and keeps its series in machineDir (the learned history's
// directory), where the TCP view's token is written. On TCP, where a
// connection cannot tell who makes it, the view needs the token and shows
// what the controller's own user sees; on the socket it shows each user
// their own. The connections are bounded (DefaultConnLimits, half for
// TCP, half for the socket). stop closes them and saves the series.
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
	// Half of the connections for TCP, half for the socket: anyone may
	// flood loopback TCP (from many 127/8 addresses), and the socket's
	// users still have theirs, each within its uid's bound.
	limits := webview.DefaultConnLimits(0)
	limits.Total /= 2
	limiter, socketLimiter := webview.NewLimiter(limits), webview.NewLimiter(limits)
	listen := func(flag, addr, what string, h http.Handler, fields map[string]any) error {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		stops = append(stops, serveBounded(limiter.Listener(ln), what, h, nil, fields, log))
		return nil
	}
	var view, tcpView http.Handler
	var token string
	if o.metricsAddr != "" || o.viewAddr != "" {
		rec := webview.NewRecorder(src, filepath.Join(machineDir, webview.SeriesFile), o.viewInterval, log)
		rec.Load(time.Now())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); rec.Run(ctx) }()
		stops = append(stops, func() { cancel(); <-done })
		view = webview.New(src, rec)
		if token, err = writeViewToken(machineDir); err != nil {
			return nil, err
		}
		self := o.admins.Viewer(uint32(os.Geteuid()), uint32(os.Getegid()))
		tcpView = webview.TokenGate(token, webview.As(self, view))
	}
	tokenField := map[string]any{"token": filepath.Join(machineDir, TokenFile)}
	if o.metricsAddr != "" {
		h := m.Handler(o.pprof)
		var fields map[string]any
		if o.viewAddr == "" {
			mux := http.NewServeMux()
			for _, p := range []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/"} {
				mux.Handle(p, h)
			}
			mux.Handle("/", tcpView)
			h, fields = mux, tokenField
		}
		if err := listen("--metrics-addr", listenAddr(o.metricsAddr), "metrics", hostChecked(h), fields); err != nil {
			return nil, err
		}
	}
	if o.viewAddr != "" {
		if err := listen("--http-addr", listenAddr(o.viewAddr), "web view", tcpView, tokenField); err != nil {
			return nil, err
		}
	}
	if view != nil && o.viewSocket != "" {
		ln, err := webview.ListenUnix(o.viewSocket)
		if err != nil {
			// The TCP view still serves; a user's `view` says none runs.
			log.Warn().Err(err).Msg("the web view's socket: not served")
		} else {
			stops = append(stops, serveBounded(socketLimiter.Listener(ln), "web view socket", view, webview.PeerViewer(o.admins), nil, log))
		}
	}
	return stop, nil
}

// hostChecked is h answering only a Host that names this machine, as the
// view does (a page of another site rebound to 127.0.0.1 reads nothing).
func hostChecked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if webview.CheckHost(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// writeViewToken makes a new token for the TCP view and writes it in
// dir's TokenFile, mode 0600 (a file renamed over the last one).
func writeViewToken(dir string) (string, error) {
	token, err := webview.NewToken()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("the web view's token: %w", err)
	}
	tmp := filepath.Join(dir, "."+TokenFile+".tmp")
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.WriteString(token + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, TokenFile))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("the web view's token: %w", err)
	}
	return token, nil
}

// serveOn serves h on addr (the value of flag) until closeIt is called,
// logging "serving WHAT" with the address it listens on; its connections
// are bounded as serveHTTP's are.
func serveOn(flag, addr, what string, h http.Handler, log zerolog.Logger) (closeIt func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return serveBounded(webview.NewLimiter(webview.DefaultConnLimits(0)).Listener(ln), what, h, nil, nil, log), nil
}

// serveBounded serves h on ln (a Limiter's) with the timeouts above until
// closeIt is called, logging "serving WHAT" with the address and fields;
// connCtx, when not nil, is the server's ConnContext.
func serveBounded(ln net.Listener, what string, h http.Handler, connCtx func(context.Context, net.Conn) context.Context, fields map[string]any, log zerolog.Logger) (closeIt func()) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: httpReadHeaderTimeout, ReadTimeout: httpReadTimeout,
		WriteTimeout: httpWriteTimeout, IdleTimeout: httpIdleTimeout, ConnContext: connCtx}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg(what + " server stopped")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Fields(fields).Msg("serving " + what)
	return func() { _ = srv.Close() }
}
