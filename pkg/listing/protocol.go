package listing

import (
	"errors"
	"net"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/labels"
)

// Socket is the unix socket, in a controller's state directory, on which
// it serves the listings of its spool: the files statted on every CPU and
// taken from the rows it holds, in a process whose memory is already
// mapped (ten thousand rows allocate some 9 MB; on the virtual machine of
// 2026-12-02, where a process touching 12 MB of fresh memory took 44–51
// ms, that was about half of a short-lived get's 97 ms).
const Socket = "get.sock"

// Protocol is the version of Request and of the reply: a controller
// declines a request of another version (and one with a field it does not
// know), so that a client never takes files it would misread. Version 1
// carried rendered text; version 2 carries rows; version 3 rows with their
// creation time and their batch's paused time.
const Protocol = 3

// Query is what a listing asks for.
type Query struct {
	// Name is the one task listed; "" for all.
	Name string `json:"name,omitempty"`
	// Selector is a label selector (k8s syntax); "" selects all.
	Selector string `json:"selector,omitempty"`
	// ByName lets the manifests the controller has not read yet be listed
	// by their file names when many are new (ReadListed): a listing that
	// shows and selects nothing of their spec.
	ByName bool `json:"byName,omitempty"`
}

// Request is what a client sends: the protocol, the spool (absolute) and
// its query. It sends one request and keeps its side of the connection
// open until the answer: a closed one is taken as gone, and not listed
// for.
type Request struct {
	Protocol int    `json:"protocol"`
	Spool    string `json:"spool"`
	Query
}

// reply heads the answer: Files lines follow, one File each (appendFile),
// in no particular order. Anything but a listing (a usage error, no such
// task, a spool that is not the controller's) is Declined, with the
// reason: the client then reads the spool itself and says what it finds,
// in its own words and paths.
type reply struct {
	Protocol int    `json:"protocol"`
	Files    int    `json:"files"`
	Declined string `json:"declined,omitempty"`
}

// Deadlines of a served listing. The controller answers within
// listingAnswer, and each piece of its listing comes within listingAnswer
// of the one before, or the client reads the spool itself (a stopped
// controller accepts the connection and never answers); the whole
// exchange ends within listingDeadline. Variables: a test on a loaded
// machine widens them, to judge what is listed rather than how fast.
var (
	listingDial     = 200 * time.Millisecond
	listingAnswer   = 3 * time.Second
	listingDeadline = 30 * time.Second
)

// Bounds: a request's size; a reply's lines and bytes (ten thousand rows
// are some 1.2 MB); the connections served at once (one more is closed at
// once: its client reads the spool itself); the wait before accepting
// again after a failed accept (out of descriptors).
const (
	maxRequest     = 64 << 10
	maxReplyFiles  = 1 << 22
	maxReplyBytes  = 1 << 30
	maxConns       = 32
	acceptRetryMax = time.Second
)

// SelectName is the first file of the task called name, alone; nil when
// none.
func SelectName(files []File, name string) []File {
	for _, f := range files {
		if f.Name() == name {
			return []File{f}
		}
	}
	return nil
}

// SelectLabels keeps the files whose task's labels match sel, in their
// order (a file that is not parseable has no labels).
func SelectLabels(files []File, sel labels.Selector) []File {
	if sel.Empty() {
		return files
	}
	var out []File
	for _, f := range files {
		var set labels.Set
		if f.Row != nil {
			set = f.Row.Labels
		}
		if sel.Matches(set) {
			out = append(out, f)
		}
	}
	return out
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
