package main

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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
)

// ListingSocket is the unix socket, in the state directory, on which a
// running controller makes get's listings (the table, -o wide, -o name):
// the same code on the same files, from the rows it holds (no index file
// read), in a process whose memory is already mapped. A listing of ten thousand rows allocates some 9 MB; on
// the virtual machine of 2026-12-02, where a process touching 12 MB of
// fresh memory took 44–51 ms, that was about half of a short-lived get's
// 97 ms.
const ListingSocket = "get.sock"

// Deadlines of a served listing. The controller answers within
// listingAnswer, and each piece of its listing comes within listingAnswer
// of the one before, or get reads the spool itself (a stopped controller
// accepts the connection and never answers); the whole exchange ends
// within listingDeadline.
var (
	listingDial = 200 * time.Millisecond
	// listingAnswer is a variable: a test on a loaded machine widens it,
	// to judge what is listed rather than how fast.
	listingAnswer   = 3 * time.Second
	listingDeadline = 30 * time.Second
)

const (
	// acceptRetryMax bounds the wait before accepting again after a
	// failed accept (out of descriptors): the service resumes.
	acceptRetryMax = time.Second
)

// maxListingRequest bounds a request's size; maxListingReply a reply's
// (ten thousand rows are some 600 KB).
const (
	maxListingRequest = 64 << 10
	maxListingReply   = 1 << 30
)

// maxListingConns bounds the connections served at once; one more is
// closed at once (its get reads the spool itself).
const maxListingConns = 32

// listingProtocol is the version of listingRequest and listingReply: a
// controller declines a request of another version (and one with a field
// it does not know), so that a get newer or older than the controller
// never prints a listing made without one of its flags.
const listingProtocol = 1

// listingRequest is what get asks: its spool (absolute) and its listing
// flags. Output is "", "wide" or "name" (indexedOutput). The client sends
// one request and keeps its side of the connection open until the
// answer: a closed one is taken as gone, and not listed for.
type listingRequest struct {
	Protocol int `json:"protocol"`
	// Binary names get's executable (executableID): the listing is drawn
	// by the controller's code, so only a controller running the same
	// binary file answers (not one started before an upgrade).
	Binary    string   `json:"binary"`
	Spool     string   `json:"spool"`
	Args      []string `json:"args,omitempty"`
	Output    string   `json:"output,omitempty"`
	Selector  string   `json:"selector,omitempty"`
	SortBy    string   `json:"sortBy,omitempty"`
	NoHeaders bool     `json:"noHeaders,omitempty"`
}

// listingReply heads the answer: Size bytes of listing follow, exactly
// what get would print. Anything but a listing (a usage error, no such
// task, a spool that is not the controller's) is Declined, with the
// reason: get then reads the spool itself and says what it finds, in its
// own words and paths.
type listingReply struct {
	Size     int    `json:"size"`
	Declined string `json:"declined,omitempty"`
}

// listingServer serves listings on ListingSocket, one at a time (each
// stats every manifest of the spool on every CPU).
type listingServer struct {
	spool  string       // absolute
	rows   listRows     // the controller's own (nil: its list index file)
	binary string       // executableID of this process
	uid    atomic.Int64 // the only peer served: this process's effective user
	ln     *net.UnixListener
	log    zerolog.Logger
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

// controllerRows are the rows of the controller serving a listing
// (reconcile.Controller.IndexedRow): current, where its list index file
// lags by an append, and never read and parsed.
type controllerRows struct{ c *reconcile.Controller }

func (r controllerRows) row(base string) (*reconcile.IndexedTask, bool) { return r.c.IndexedRow(base) }

func (controllerRows) refresh() {} // row already reads the controller's current rows

// serveListings listens on ListingSocket in stateDir and serves listings
// of the spool at spoolAbs, from its controller's rows (nil: from its list
// index file), until Close. A socket left there by a killed controller is
// replaced; anything else there is left alone (an error).
func serveListings(stateDir, spoolAbs string, rows listRows, log zerolog.Logger, observe func(time.Duration, bool)) (*listingServer, error) {
	path := filepath.Join(stateDir, ListingSocket)
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
	binary, err := executableID("/proc/self/exe")
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	s := &listingServer{spool: spoolAbs, rows: rows, binary: binary, ln: ln, log: log, observe: observe,
		one: make(chan struct{}, 1), closing: make(chan struct{}), open: map[*net.UnixConn]struct{}{}}
	s.uid.Store(int64(os.Geteuid()))
	s.conns.Add(1)
	go s.accept()
	return s, nil
}

// Close stops serving (the socket is removed), closes the connections
// open and waits for their goroutines. Later calls do nothing.
func (s *listingServer) Close() { s.closeOnce.Do(s.close) }

func (s *listingServer) close() {
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

func (s *listingServer) accept() {
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
			s.log.Warn().Err(err).Dur("retry", wait).Msg("get's listing socket: accept failed")
			select {
			case <-time.After(wait):
				continue
			case <-s.closing:
				return
			}
		}
		wait = 0
		s.mu.Lock()
		if s.open == nil || len(s.open) >= maxListingConns { // closed, or too many
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
// closed unanswered, or a Declined reply). A panic in a listing is
// logged, never the controller's end.
func (s *listingServer) serve(conn *net.UnixConn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(listingDeadline))
	if uid, err := peerUID(conn); err != nil || int64(uid) != s.uid.Load() {
		return
	}
	var req listingRequest
	dec := json.NewDecoder(io.LimitReader(conn, maxListingRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return
	}
	start := time.Now()
	out, declined := s.list(&req, start.Add(listingAnswer), conn)
	if s.observe != nil {
		s.observe(time.Since(start), declined == "")
	}
	head, _ := json.Marshal(listingReply{Size: len(out), Declined: declined})
	_, _ = conn.Write(append(head, '\n'))
	if declined == "" {
		_, _ = io.WriteString(conn, out)
	}
}

// list makes the listing req asks for, or says why not; a request still
// waiting for the listing under way at giveUp, when its client stops
// waiting, is not listed.
func (s *listingServer) list(req *listingRequest, giveUp time.Time, conn *net.UnixConn) (out, declined string) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Str("panic", fmt.Sprint(p)).Msg("get's listing failed; get reads the spool itself")
			out, declined = "", "the listing failed"
		}
	}()
	if req.Protocol != listingProtocol {
		return "", fmt.Sprintf("protocol %d, not %d", req.Protocol, listingProtocol)
	}
	if req.Binary != s.binary {
		return "", "get is another binary than the controller's"
	}
	if req.Spool != s.spool {
		return "", fmt.Sprintf("not this controller's spool (%s)", s.spool)
	}
	o := &getOptions{output: req.Output, selector: req.Selector, sortBy: req.SortBy, noHeaders: req.NoHeaders}
	sel, err := o.check()
	switch {
	case err != nil:
		return "", err.Error()
	case !indexedOutput(o):
		return "", "-o " + strconv.Quote(o.output) + " is read from the files"
	case len(req.Args) > 1:
		return "", "more than one task named"
	}
	wait := time.NewTimer(time.Until(giveUp))
	defer wait.Stop()
	select {
	case s.one <- struct{}{}:
		defer func() { <-s.one }()
	case <-wait.C:
		return "", "busy with another listing"
	case <-s.closing:
		return "", "stopping"
	}
	select {
	case <-s.closing: // closed while waiting, with the listing's slot free
		return "", "stopping"
	default:
	}
	if clientGone(conn) {
		return "", "nobody waits for it"
	}
	files, err := listTasks(s.spool, s.rows, req.Args, sel, o)
	if err != nil {
		return "", err.Error()
	}
	out, err = showFiles(files, o, len(req.Args) == 1, time.Now())
	if err != nil {
		return "", err.Error()
	}
	return out, ""
}

// clientGone reports whether the client of conn has closed its side (or
// sent more than its request): a client keeps it open until the answer,
// and one that gave up is not listed for. It looks without waiting: a
// read of the socket (non-blocking) that finds nothing to read is a
// client still waiting.
func clientGone(conn *net.UnixConn) bool {
	raw, err := conn.SyscallConn()
	if err != nil {
		return true
	}
	gone := true
	_ = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = n > 0 || !errors.Is(err, unix.EAGAIN)
		return true // done, whatever it found: never wait
	})
	return gone
}

// peerUID is the effective user of the process at the other end of conn.
func peerUID(conn *net.UnixConn) (int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if credErr != nil {
		return -1, credErr
	}
	return int(cred.Uid), nil
}

// executableID names the executable file at path (through symlinks: for
// /proc/self/exe, the file this process runs, even replaced since) by
// its device, inode, size and modification time.
func executableID(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d:%d:%d", st.Dev, st.Ino, st.Size, st.Mtim.Nano()), nil
}

// listedByController asks the controller running on the spool at dir
// for the listing of args and o, and writes it to w. It reports false,
// having written nothing, when no controller answers it in time (none
// runs, one that is stopped, one of another user, or one with another
// state directory), or when it declines (another binary, not a listing):
// get then reads the spool itself. The listing is escaped as get's own
// (safeText), whoever answered.
func listedByController(dir string, args []string, o *getOptions, w io.Writer) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	path := filepath.Join(spoolStateDir(abs), ListingSocket)
	if st, err := os.Lstat(path); err != nil || st.Mode().Type() != fs.ModeSocket {
		return false // no controller ever served here: no dial
	}
	binary, err := executableID("/proc/self/exe")
	if err != nil {
		return false
	}
	c, err := net.DialTimeout("unix", path, listingDial)
	if err != nil {
		return false
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	// Only a controller of this user: another could draw anything.
	if uid, err := peerUID(conn); err != nil || uid != os.Geteuid() {
		return false
	}
	_ = conn.SetDeadline(time.Now().Add(listingAnswer))
	req, err := json.Marshal(listingRequest{Protocol: listingProtocol, Binary: binary, Spool: abs, Args: args, Output: o.output, Selector: o.selector, SortBy: o.sortBy, NoHeaders: o.noHeaders})
	if err != nil {
		return false
	}
	if _, err := conn.Write(req); err != nil {
		return false
	}
	br := bufio.NewReader(conn)
	head, err := br.ReadSlice('\n')
	var reply listingReply
	if err != nil || json.Unmarshal(head, &reply) != nil || reply.Declined != "" || reply.Size < 0 || reply.Size > maxListingReply {
		return false
	}
	// The listing is read whole before a byte of it is printed: a
	// controller that dies half-way leaves get to read the spool itself,
	// and so does one that stops mid-way (pacedReader).
	var out strings.Builder
	out.Grow(min(reply.Size, 4<<20)) // the size is the other side's word
	pieces := &pacedReader{conn: conn, r: br, end: time.Now().Add(listingDeadline)}
	if _, err := io.CopyN(&out, pieces, int64(reply.Size)); err != nil {
		return false
	}
	_, _ = io.WriteString(w, safeText(out.String()))
	return true
}

// pacedReader reads r, the buffered side of conn, each read given
// listingAnswer to bring something, all of them ending by end.
type pacedReader struct {
	conn *net.UnixConn
	r    io.Reader
	end  time.Time
}

func (p *pacedReader) Read(b []byte) (int, error) {
	next := time.Now().Add(listingAnswer)
	if next.After(p.end) {
		next = p.end
	}
	_ = p.conn.SetReadDeadline(next)
	return p.r.Read(b)
}
