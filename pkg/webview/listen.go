package webview

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ConnLimits bound a controller's HTTP connections: Total over every
// listener sharing a Limiter, PerPeer for one peer (a TCP peer is its IP
// address, a unix one its uid). A connection over a bound is closed as
// soon as accepted: the peers under it are still served, and the
// controller's descriptors stay for its batches.
type ConnLimits struct {
	Total, PerPeer int
}

// Bounds of DefaultConnLimits.
const (
	minConns = 16
	maxConns = 1024
	// nofileShare: the connections may take one descriptor in this many
	// of RLIMIT_NOFILE; the rest is the batches' and the controller's.
	nofileShare = 8
)

// DefaultConnLimits are the bounds for a process that may open nofile
// descriptors (its RLIMIT_NOFILE; 0: read it): an eighth of them in all,
// from 16 to 1024, and a quarter of that per peer (at least 4: a browser
// opens 6 at most per host, and waits for a free one).
func DefaultConnLimits(nofile uint64) ConnLimits {
	if nofile == 0 {
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
			nofile = rl.Cur
		} else {
			nofile = 1024
		}
	}
	total := int(min(max(nofile/nofileShare, minConns), maxConns))
	return ConnLimits{Total: total, PerPeer: max(4, total/4)}
}

// Limiter counts the connections of the listeners it wraps, together.
type Limiter struct {
	limits  ConnLimits
	refused atomic.Int64
	mu      struct {
		sync.Mutex
		total int
		peers map[string]int
	}
}

// NewLimiter is a limiter of l.
func NewLimiter(l ConnLimits) *Limiter {
	lim := &Limiter{limits: l}
	lim.mu.peers = map[string]int{}
	return lim
}

// Refused is how many connections were closed for a bound.
func (l *Limiter) Refused() int64 { return l.refused.Load() }

// Open is how many connections are open, in all.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.total
}

// take counts one more connection of peer, when under both bounds.
func (l *Limiter) take(peer string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.total >= l.limits.Total || l.mu.peers[peer] >= l.limits.PerPeer {
		return false
	}
	l.mu.total++
	l.mu.peers[peer]++
	return true
}

func (l *Limiter) release(peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.total--
	if l.mu.peers[peer]--; l.mu.peers[peer] <= 0 {
		delete(l.mu.peers, peer)
	}
}

// Listener is ln whose connections l bounds.
func (l *Limiter) Listener(ln net.Listener) net.Listener { return &limitedListener{Listener: ln, l: l} }

type limitedListener struct {
	net.Listener
	l *Limiter
}

// Accept returns the next connection within the bounds; those over them
// are closed. An error of the listener's (out of descriptors) is
// returned: http.Server waits, then accepts again.
func (ln *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer, cred := peerOf(c)
		if peer == "" || !ln.l.take(peer) {
			ln.l.refused.Add(1)
			_ = c.Close()
			continue
		}
		return &limitedConn{Conn: c, l: ln.l, peer: peer, cred: cred}, nil
	}
}

// limitedConn is one counted connection; closing it frees its place once.
type limitedConn struct {
	net.Conn
	l    *Limiter
	peer string
	cred *unix.Ucred // a unix socket's peer
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.peer) })
	return err
}

// peerOf is who is at the other end of c: "ip:ADDRESS" for TCP, "uid:N"
// with its credentials for a unix socket (SO_PEERCRED, as the kernel
// says, not as the peer claims); "" when unknown.
func peerOf(c net.Conn) (string, *unix.Ucred) {
	switch conn := c.(type) {
	case *net.TCPConn:
		if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
			return "ip:" + a.IP.String(), nil
		}
	case *net.UnixConn:
		if cred, err := PeerCred(conn); err == nil {
			return "uid:" + strconv.FormatUint(uint64(cred.Uid), 10), cred
		}
	}
	return "", nil
}

// PeerCred are the credentials of the process at the other end of conn
// when it connected (SO_PEERCRED).
func PeerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}

// PeerViewer is an http.Server's ConnContext for the view's unix socket
// (its listener a Limiter's): each request carries the Viewer its peer's
// credentials make of it, by admins. A connection without credentials
// carries none, and the view refuses it.
func PeerViewer(admins Admins) func(ctx context.Context, c net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		if lc, ok := c.(*limitedConn); ok && lc.cred != nil {
			return WithViewer(ctx, admins.Viewer(lc.cred.Uid, lc.cred.Gid))
		}
		return ctx
	}
}

// ListenUnix listens on the unix socket path, which every user may
// connect to (mode 0666: the view asks the kernel who connects). What is
// at its name (a socket left by a killed controller, a file another user
// put there in advance) is removed, unless a directory (an error): the
// name is the caller's (SocketName).
func ListenUnix(path string) (*net.UnixListener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.IsDir() {
			return nil, fmt.Errorf("%s exists and is a directory", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, err
	}
	return ln, nil
}

// SocketName is the view's unix socket of the controller pid, in the
// registry directory where its claim is: a user's `lardon3d-controller
// view` finds it there by the claim's PID.
func SocketName(pid int) string { return "view-" + strconv.Itoa(pid) + ".sock" }
