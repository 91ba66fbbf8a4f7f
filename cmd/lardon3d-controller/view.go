package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lardon3d/lardon3d-controller/pkg/registry"
	"github.com/lardon3d/lardon3d-controller/pkg/webview"
)

func newViewCommand(g *globals) *cobra.Command {
	var addr, socket string
	cmd := &cobra.Command{
		Use:   "view",
		Short: "Open the web view as yourself: a local port forwarded to the running controller's view",
		Long: `Open the running controller's web view as yourself. The controller
serves its view on a unix socket beside its claim (the registry directory,
/run/lardon3d for the system service), where it asks the kernel who
connects: you see your own spools' tasks, logs and names, and the machine's
charts with other users' usage summed as "other users" (root and the
--view-admin-group see everything). view connects to that socket as you and
forwards a port of the loopback interface to it; it prints the URL to open,
with a random token: the first visit sets a cookie, then every request needs
it, so another user of the machine cannot use the port. It serves until
interrupted.

The controller is the one serving --spool when it runs, else the only one
whose view is served.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:0", "where to listen (a port alone, :8080, means loopback)")
	f.StringVar(&socket, "socket", "", "the view's socket to connect to (default: the running controller's, found in the registry)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log, err := newLogger(g, cmd.ErrOrStderr())
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		path := socket
		if path == "" {
			if path, err = findViewSocket(g.spool); err != nil {
				return &exitError{code: exitUsage, err: err}
			}
		}
		token, err := webview.NewToken()
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", listenAddr(addr))
		if err != nil {
			return &exitError{code: exitUsage, err: fmt.Errorf("--addr: %w", err)}
		}
		var dialer net.Dialer
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", "localhost", "localhost"
				// The token is this port's, not the controller's business.
				pr.Out.Header.Del("Cookie")
				pr.Out.Header.Del("Authorization")
			},
			Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return dialer.DialContext(ctx, "unix", path)
				},
				MaxIdleConns: 4,
			},
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				http.Error(w, "the controller's view does not answer: "+err.Error(), http.StatusBadGateway)
			},
		}
		url := "http://" + ln.Addr().String() + "/?" + webview.TokenParam + "=" + token
		fmt.Fprintf(cmd.OutOrStdout(), "Open %s\n(the web view of %s, as uid %d; Ctrl-C to stop)\n", url, path, os.Getuid())
		stop := serveBounded(webview.NewLimiter(webview.DefaultConnLimits(0)).Listener(ln), "forwarded web view",
			webview.TokenGate(token, proxy), nil, nil, log)
		defer stop()
		ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer cancel()
		<-ctx.Done()
		return nil
	}
	return cmd
}

// findViewSocket is the view's socket of the controller serving spool,
// else of the only controller whose view is served. A socket is the
// controller's only when its claim's user owns it: anyone may make a
// file in the registry directory.
func findViewSocket(spool string) (string, error) {
	claims, err := registry.Live()
	if err != nil {
		return "", err
	}
	socketOf := func(c registry.Claim) string {
		for _, d := range registry.Dirs() {
			p := filepath.Join(d, webview.SocketName(c.PID))
			st, err := os.Lstat(p)
			if err != nil || st.Mode().Type() != fs.ModeSocket {
				continue
			}
			if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) == c.UID {
				return p
			}
		}
		return ""
	}
	if c, ok, err := registry.Serving(spool); err == nil && ok {
		if p := socketOf(c); p != "" {
			return p, nil
		}
		return "", fmt.Errorf("the controller serving %s (pid %d) serves no web view: it runs without --http-addr or --metrics-addr", spool, c.PID)
	}
	var found []string
	for _, c := range claims {
		if p := socketOf(c); p != "" {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return "", errors.New("no running controller serves a web view (run --http-addr or --metrics-addr)")
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("several controllers serve a web view (%s): name one with --socket, or its spool with --spool", strings.Join(found, ", "))
}
