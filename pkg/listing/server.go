package listing

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/labels"
)

// Server serves the listings of one spool on Socket, one at a time (each
// stats every manifest of the spool on every CPU).
type Server struct {
	spool Spool        // Dir absolute
	rows  Rows         // the controller's (nil: every manifest parsed)
	uid   atomic.Int64 // the only peer served: this process's effective user
	ln    *net.UnixListener
	log   zerolog.Logger
	// observe records each answer's time and whether it was a listing.
	observe func(d time.Duration, served bool)
	// one is held by the listing under way; a request waits for it at
	// most until its client gives up (listingAnswer after it came), and
	// not once closing is closed.
	one       chan struct{}
	closing   chan struct{}
	closeOnce sync.Once
	// mu guards open, the connections being served (Close closes them:
	// a client that sends nothing does not hold the controller's exit).
	mu    sync.Mutex
	open  map[*net.UnixConn]struct{}
	conns sync.WaitGroup
}

// Serve listens on Socket in stateDir and serves listings of sp (its Dir
// absolute), from rows (nil: every manifest parsed), until Close. observe,
// when not nil, records each answer's time and whether it was a listing.
// A socket left there by a killed controller is replaced; anything else
// there is left alone (an error).
func Serve(stateDir string, sp Spool, rows Rows, log zerolog.Logger, observe func(time.Duration, bool)) (*Server, error) {
	path := filepath.Join(stateDir, Socket)
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		// The controller's lock is held: no other controller listens there.
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// Only this user (the peer's credentials are checked too): the state
	// directory's mode may be looser than the default one's.
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, err
	}
	s := &Server{spool: sp, rows: rows, ln: ln, log: log, observe: observe,
		one: make(chan struct{}, 1), closing: make(chan struct{}), open: map[*net.UnixConn]struct{}{}}
	s.uid.Store(int64(os.Geteuid()))
	s.conns.Add(1)
	go s.accept()
	return s, nil
}

// Close stops serving (the socket is removed), closes the connections
// open and waits for their goroutines. Later calls do nothing.
func (s *Server) Close() { s.closeOnce.Do(s.close) }

func (s *Server) close() {
	close(s.closing)
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.open {
		_ = c.Close()
	}
	s.open = nil
	s.mu.Unlock()
	s.conns.Wait()
}

func (s *Server) accept() {
	defer s.conns.Done()
	var wait time.Duration // before accepting again after a failure
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors, most likely: the connections waiting
			// are taken once some are freed, as net/http does.
			wait = min(max(2*wait, 5*time.Millisecond), acceptRetryMax)
			s.log.Warn().Err(err).Dur("retry", wait).Msg("the listing socket: accept failed")
			select {
			case <-time.After(wait):
				continue
			case <-s.closing:
				return
			}
		}
		wait = 0
		s.mu.Lock()
		if s.open == nil || len(s.open) >= maxConns { // closed, or too many
			s.mu.Unlock()
			_ = conn.Close()
			continue
		}
		s.open[conn] = struct{}{}
		s.conns.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.conns.Done()
			s.serve(conn)
			s.mu.Lock()
			delete(s.open, conn)
			s.mu.Unlock()
		}()
	}
}

// serve answers one connection: a listing, or a refusal (the connection
// closed unanswered, or a declined reply). A panic in a listing is
// logged, never the controller's end.
func (s *Server) serve(conn *net.UnixConn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(listingDeadline))
	if uid, err := peerUID(conn); err != nil || int64(uid) != s.uid.Load() {
		return
	}
	var req Request
	dec := json.NewDecoder(io.LimitReader(conn, maxRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return
	}
	start := time.Now()
	files, declined := s.list(&req, start.Add(listingAnswer), conn)
	if s.observe != nil {
		s.observe(time.Since(start), declined == "")
	}
	w := bufio.NewWriterSize(conn, 64<<10)
	head, _ := json.Marshal(reply{Protocol: Protocol, Files: len(files), Declined: declined})
	_, _ = w.Write(append(head, '\n'))
	var line []byte
	for i := range files {
		line = appendFile(line[:0], &files[i])
		if _, err := w.Write(line); err != nil {
			return
		}
	}
	_ = w.Flush()
}

// list reads the files req asks for, or says why not; a request still
// waiting for the listing under way at giveUp, when its client stops
// waiting, is not listed.
func (s *Server) list(req *Request, giveUp time.Time, conn *net.UnixConn) (files []File, declined string) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Str("panic", fmt.Sprint(p)).Msg("a served listing failed; get reads the spool itself")
			files, declined = nil, "the listing failed"
		}
	}()
	if req.Protocol != Protocol {
		return nil, fmt.Sprintf("protocol %d, not %d", req.Protocol, Protocol)
	}
	if req.Spool != s.spool.Dir {
		return nil, fmt.Sprintf("not this controller's spool (%s)", s.spool.Dir)
	}
	sel, err := labels.Parse(req.Selector)
	if err != nil {
		return nil, fmt.Sprintf("-l %q: %v", req.Selector, err)
	}
	wait := time.NewTimer(time.Until(giveUp))
	defer wait.Stop()
	select {
	case s.one <- struct{}{}:
		defer func() { <-s.one }()
	case <-wait.C:
		return nil, "busy with another listing"
	case <-s.closing:
		return nil, "stopping"
	}
	select {
	case <-s.closing: // closed while waiting, with the listing's slot free
		return nil, "stopping"
	default:
	}
	if clientGone(conn) {
		return nil, "nobody waits for it"
	}
	files, err = s.spool.ReadListed(s.rows, req.ByName && req.Name == "" && sel.Empty())
	if err != nil {
		return nil, err.Error()
	}
	if req.Name != "" {
		if files = SelectName(files, req.Name); len(files) == 0 {
			return nil, fmt.Sprintf("no task %q", req.Name)
		}
	}
	return SelectLabels(files, sel), ""
}
