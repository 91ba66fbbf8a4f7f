package listing

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Ask asks the controller serving in stateDir for the files of the spool
// at dir that q selects, in no particular order. ok is false, nothing
// taken, when no controller answers in time (none runs, one that is
// stopped, one of another user) or when it declines (another protocol,
// another spool, no such task, a bad selector): the caller then reads the
// spool itself. Any version of the controller that speaks Protocol may
// answer: it sends rows, which the caller renders.
func Ask(stateDir, dir string, q Query) (files []File, ok bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, false
	}
	path := filepath.Join(stateDir, Socket)
	if st, err := os.Lstat(path); err != nil || st.Mode().Type() != fs.ModeSocket {
		return nil, false // no controller ever served here: no dial
	}
	c, err := net.DialTimeout("unix", path, listingDial)
	if err != nil {
		return nil, false
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	// Only a controller of this user: another could list anything.
	if uid, err := peerUID(conn); err != nil || uid != os.Geteuid() {
		return nil, false
	}
	_ = conn.SetDeadline(time.Now().Add(listingAnswer))
	req, err := json.Marshal(Request{Protocol: Protocol, Spool: abs, Query: q})
	if err != nil {
		return nil, false
	}
	if _, err := conn.Write(req); err != nil {
		return nil, false
	}
	// The files are read whole before one is taken: a controller that
	// dies half-way leaves the caller to read the spool itself, and so
	// does one that stops mid-way (pacedReader).
	r := bufio.NewReaderSize(&pacedReader{conn: conn, r: io.LimitReader(conn, maxReplyBytes), end: time.Now().Add(listingDeadline)}, 64<<10)
	head, err := r.ReadSlice('\n')
	var rep reply
	if err != nil || json.Unmarshal(head, &rep) != nil || rep.Protocol != Protocol || rep.Declined != "" || rep.Files < 0 || rep.Files > maxReplyFiles {
		return nil, false
	}
	files = make([]File, 0, min(rep.Files, 1<<16)) // the count is the other side's word
	prefix := pathPrefix(dir)
	for range rep.Files {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, false
		}
		f, err := parseFile(prefix, line[:len(line)-1])
		if err != nil {
			return nil, false
		}
		files = append(files, f)
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		return nil, false // more than announced
	}
	return files, true
}

// pacedReader reads r, from conn, each read given listingAnswer to bring
// something, all of them ending by end.
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
