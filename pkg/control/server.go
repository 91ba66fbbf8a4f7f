package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
)

// Backend is what the server asks of the controller.
type Backend interface {
	// Hold waits for d to be reserved for p, calling waiting with the
	// governor's reason each time it changes, until granted, refused
	// (d.NoWait, a demand that never fits) or ctx ends. release frees the
	// reservation; the server calls it exactly once.
	Hold(ctx context.Context, p Peer, d Demand, waiting func(reason string)) (g Grant, release func(), err error)
	// Budgets is the governor's view and every hold.
	Budgets() (governor.BudgetsView, []HoldInfo)
	// AddSpool serves the spool whose directory p opened (dir) and names
	// path, as its owner's; it returns the state directory.
	AddSpool(p Peer, dir *os.File, path string) (stateDir string, err error)
	// RemoveSpool stops serving a spool AddSpool added.
	RemoveSpool(p Peer, path string) error
}

// Server serves the control socket until Close.
type Server struct {
	b       Backend
	ln      *net.UnixListener
	path    string
	log     zerolog.Logger
	closing chan struct{}
	once    sync.Once
	// mu guards open and perUID: the connections being served (Close
	// closes them) and how many each user has.
	mu     sync.Mutex
	open   map[*net.UnixConn]struct{}
	perUID map[int]int
	conns  sync.WaitGroup
}

// Listen serves b on path (SocketPath), mode 0666, until Close. A socket
// left at path is replaced (the caller's claim says no live controller
// has its PID); anything else there is an error.
func Listen(path string, b Backend, log zerolog.Logger) (*Server, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	// Everyone may connect: each request is judged by its peer's
	// credentials.
	if err := os.Chmod(path, 0o666); err != nil {
		_ = ln.Close()
		return nil, err
	}
	s := &Server{b: b, ln: ln, path: path, log: log, closing: make(chan struct{}),
		open: map[*net.UnixConn]struct{}{}, perUID: map[int]int{}}
	s.conns.Add(1)
	go s.accept()
	return s, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops serving (the socket is removed), ends every connection
// (their holds are released) and waits for their goroutines. Later calls
// do nothing.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.closing)
		_ = s.ln.Close()
		s.mu.Lock()
		for c := range s.open {
			_ = c.Close()
		}
		s.open = nil
		s.mu.Unlock()
		s.conns.Wait()
	})
}

func (s *Server) accept() {
	defer s.conns.Done()
	var wait time.Duration
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			wait = min(max(2*wait, 5*time.Millisecond), acceptRetryMax)
			s.log.Warn().Err(err).Dur("retry", wait).Msg("the control socket: accept failed")
			select {
			case <-time.After(wait):
				continue
			case <-s.closing:
				return
			}
		}
		wait = 0
		p, err := peerOf(conn)
		if err != nil {
			_ = conn.Close()
			continue
		}
		s.mu.Lock()
		if s.open == nil || len(s.open) >= maxConns || s.perUID[p.UID] >= maxConnsPerUID {
			s.mu.Unlock()
			_ = conn.Close()
			continue
		}
		s.open[conn] = struct{}{}
		s.perUID[p.UID]++
		s.conns.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.conns.Done()
			s.serve(conn, p)
			s.mu.Lock()
			if s.open != nil {
				delete(s.open, conn)
			}
			if s.perUID[p.UID]--; s.perUID[p.UID] <= 0 {
				delete(s.perUID, p.UID)
			}
			s.mu.Unlock()
		}()
	}
}

// serve answers one connection. A panic in a backend is logged, never the
// controller's end.
func (s *Server) serve(conn *net.UnixConn, p Peer) {
	defer conn.Close()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error().Str("panic", fmt.Sprint(r)).Int("uid", p.UID).Msg("a control request failed")
		}
	}()
	_ = conn.SetDeadline(time.Now().Add(requestWait))
	req, files, err := readRequest(conn)
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	if err != nil {
		writeReply(conn, Reply{Event: EventError, Message: err.Error()})
		return
	}
	if req.Protocol != Protocol {
		writeReply(conn, Reply{Event: EventError, Message: fmt.Sprintf("protocol %d, not %d", req.Protocol, Protocol)})
		return
	}
	switch req.Op {
	case OpHold:
		_ = conn.SetDeadline(time.Time{})
		s.hold(conn, p, req)
	case OpBudgets:
		v, holds := s.b.Budgets()
		writeReply(conn, Reply{Event: EventOK, Budgets: &v, Holds: holds})
	case OpSpoolAdd:
		if len(files) != 1 {
			writeReply(conn, Reply{Event: EventError, Message: "spool-add: send the spool directory's descriptor with the request"})
			return
		}
		_ = conn.SetDeadline(time.Now().Add(time.Minute)) // preparing a state directory may kill a crashed run's leftovers
		stateDir, err := s.b.AddSpool(p, files[0], req.Spool)
		if err != nil {
			writeReply(conn, Reply{Event: EventError, Message: err.Error()})
			return
		}
		writeReply(conn, Reply{Event: EventOK, Spool: req.Spool, StateDir: stateDir})
	case OpSpoolRemove:
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		if err := s.b.RemoveSpool(p, req.Spool); err != nil {
			writeReply(conn, Reply{Event: EventError, Message: err.Error()})
			return
		}
		writeReply(conn, Reply{Event: EventOK, Spool: req.Spool})
	default:
		writeReply(conn, Reply{Event: EventError, Message: fmt.Sprintf("unknown operation %q", req.Op)})
	}
}

// hold serves OpHold: the reservation lives until the connection ends.
func (s *Server) hold(conn *net.UnixConn, p Peer, req Request) {
	if req.Hold == nil {
		writeReply(conn, Reply{Event: EventError, Message: "hold: no demand"})
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client sends nothing more: a read ends when it closes (its
	// process ended, kill -9 included) or the server closes.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		defer cancel()
		var b [256]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				return
			}
		}
	}()
	var writeMu sync.Mutex
	waiting := func(reason string) {
		writeMu.Lock()
		defer writeMu.Unlock()
		if !writeReply(conn, Reply{Event: EventWaiting, Message: reason}) {
			cancel()
		}
	}
	g, release, err := s.b.Hold(ctx, p, *req.Hold, waiting)
	writeMu.Lock()
	defer writeMu.Unlock()
	if err != nil {
		writeReply(conn, Reply{Event: EventError, Message: err.Error()})
		_ = conn.CloseRead()
		<-gone
		return
	}
	defer release() // exactly once: here, whatever ends the connection
	if !writeReply(conn, Reply{Event: EventGranted, Grant: &g}) {
		_ = conn.Close()
	}
	select {
	case <-gone:
	case <-s.closing:
		_ = conn.Close()
		<-gone
	}
}

// readRequest reads the request line and the descriptors sent with it
// (at most one message's worth, closed by the caller).
func readRequest(conn *net.UnixConn) (Request, []*os.File, error) {
	var req Request
	var files []*os.File
	buf := make([]byte, 0, 4096)
	oob := make([]byte, unix.CmsgSpace(4*4))
	chunk := make([]byte, 4096)
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(chunk, oob)
		if oobn > 0 {
			files = append(files, parseRights(oob[:oobn])...)
		}
		buf = append(buf, chunk[:n]...)
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			dec := json.NewDecoder(bytes.NewReader(buf[:i]))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				return req, files, fmt.Errorf("bad request: %w", err)
			}
			return req, files, nil
		}
		if len(buf) > maxRequest {
			return req, files, errors.New("request too long")
		}
		if err != nil {
			return req, files, fmt.Errorf("reading the request: %w", err)
		}
	}
}

// parseRights turns the descriptors of SCM_RIGHTS messages into files;
// anything else is ignored.
func parseRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var out []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			out = append(out, os.NewFile(uintptr(fd), "received"))
		}
	}
	return out
}

// writeReply writes one line; false when it could not.
func writeReply(conn *net.UnixConn, r Reply) bool {
	r.Protocol = Protocol
	line, err := json.Marshal(r)
	if err != nil {
		return false
	}
	_, err = conn.Write(append(line, '\n'))
	return err == nil
}

// peerOf is the kernel's word on the other end of conn.
func peerOf(conn *net.UnixConn) (Peer, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if credErr != nil {
		return Peer{}, credErr
	}
	return Peer{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}, nil
}
