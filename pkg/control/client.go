package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
)

// ErrNoController is returned by Find when no live controller of the
// machine that is root's or the caller's own has a control socket.
var ErrNoController = errors.New("no controller of root or of this user runs on this machine with a control socket")

// Target is a controller to talk to: its claim and its socket.
type Target struct {
	Claim  registry.Claim
	Socket string
}

// Find returns the controller to ask: among the live claims of the
// registry whose controllers are root's or this user's and have a control
// socket, this user's own first, then root's (the system service); the
// oldest first among equals.
func Find() (Target, error) {
	live, err := registry.Live()
	me := os.Geteuid()
	var found []Target
	for _, c := range live {
		if c.UID != 0 && c.UID != me {
			continue
		}
		if t, ok := TargetOf(c); ok {
			found = append(found, t)
		}
	}
	if len(found) == 0 {
		if err != nil {
			return Target{}, fmt.Errorf("%w (%v)", ErrNoController, err)
		}
		return Target{}, ErrNoController
	}
	slices.SortStableFunc(found, func(a, b Target) int {
		ao, bo := a.Claim.UID == me, b.Claim.UID == me
		switch {
		case ao && !bo:
			return -1
		case bo && !ao:
			return 1
		}
		return a.Claim.Started.Compare(b.Claim.Started)
	})
	return found[0], nil
}

// TargetOf is the control socket of a live claim, if its controller has
// one in a registry directory.
func TargetOf(c registry.Claim) (Target, bool) {
	for _, dir := range registry.Dirs() {
		p := SocketPath(dir, c.PID)
		if st, err := os.Lstat(p); err == nil && st.Mode().Type() == fs.ModeSocket {
			return Target{Claim: c, Socket: p}, true
		}
	}
	return Target{}, false
}

// Conn is one request's connection.
type Conn struct {
	c *net.UnixConn
	r *bufio.Reader
}

// Dial connects to t and checks that the server is t's controller: the
// PID and user its claim has, as the kernel says them. Nothing is sent to
// a socket someone else planted.
func Dial(t Target) (*Conn, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: t.Socket, Net: "unix"})
	if err != nil {
		return nil, err
	}
	p, err := peerOf(c)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	if p.PID != t.Claim.PID || p.UID != t.Claim.UID {
		_ = c.Close()
		return nil, fmt.Errorf("%s is served by PID %d (uid %d), not by the controller registered (PID %d, uid %d): not used", t.Socket, p.PID, p.UID, t.Claim.PID, t.Claim.UID)
	}
	return &Conn{c: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

// Close ends the connection: a hold it carries is released.
func (c *Conn) Close() error { return c.c.Close() }

// send writes the request, with the descriptor fd when >= 0.
func (c *Conn) send(req Request, fd int) error {
	req.Protocol = Protocol
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if fd < 0 {
		_, err = c.c.Write(line)
		return err
	}
	_, _, err = c.c.WriteMsgUnix(line, unix.UnixRights(fd), nil)
	return err
}

// next reads one reply line.
func (c *Conn) next() (Reply, error) {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return Reply{}, fmt.Errorf("the controller closed the connection: %w", err)
	}
	var r Reply
	if err := json.Unmarshal(line, &r); err != nil {
		return Reply{}, fmt.Errorf("bad reply: %w", err)
	}
	if r.Event == EventError {
		return r, &RefusedError{Message: r.Message}
	}
	return r, nil
}

// RefusedError is the controller's refusal of a request.
type RefusedError struct{ Message string }

func (e *RefusedError) Error() string { return e.Message }

// Hold asks for d and waits, calling waiting with each reason the
// governor gives, until granted (the hold then lasts until Close, or the
// process's end), refused, or ctx ends (the connection is closed: nothing
// stays reserved).
func (c *Conn) Hold(ctx context.Context, d Demand, waiting func(reason string)) (Grant, error) {
	if err := c.send(Request{Op: OpHold, Hold: &d}, -1); err != nil {
		return Grant{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.c.Close() })
	defer stop()
	for {
		r, err := c.next()
		if err != nil {
			if ctx.Err() != nil {
				return Grant{}, ctx.Err()
			}
			return Grant{}, err
		}
		switch r.Event {
		case EventWaiting:
			if waiting != nil {
				waiting(r.Message)
			}
		case EventGranted:
			if r.Grant == nil {
				return Grant{}, errors.New("bad reply: granted without a grant")
			}
			return *r.Grant, nil
		default:
			return Grant{}, fmt.Errorf("bad reply: event %q", r.Event)
		}
	}
}

// Budgets asks for the governor's budgets and the holds.
func (c *Conn) Budgets() (Reply, error) {
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := c.send(Request{Op: OpBudgets}, -1); err != nil {
		return Reply{}, err
	}
	return c.next()
}

// AddSpool asks the controller to serve dir, sending the directory as
// this process opened it. It returns the reply (the spool's name and
// state directory).
func (c *Conn) AddSpool(dir string) (Reply, error) {
	abs, err := absReal(dir)
	if err != nil {
		return Reply{}, err
	}
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Reply{}, &fs.PathError{Op: "open", Path: abs, Err: err}
	}
	defer unix.Close(fd)
	_ = c.c.SetDeadline(time.Now().Add(2 * time.Minute))
	if err := c.send(Request{Op: OpSpoolAdd, Spool: abs}, fd); err != nil {
		return Reply{}, err
	}
	return c.next()
}

// RemoveSpool asks the controller to stop serving dir.
func (c *Conn) RemoveSpool(dir string) error {
	abs, err := absReal(dir)
	if err != nil {
		abs, _ = filepath.Abs(dir) // gone: its name as given
	}
	_ = c.c.SetDeadline(time.Now().Add(2 * time.Minute))
	if err := c.send(Request{Op: OpSpoolRemove, Spool: abs}, -1); err != nil {
		return err
	}
	_, err = c.next()
	return err
}

// absReal is dir absolute, symlinks resolved.
func absReal(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	return filepath.Clean(real), nil
}

// FormatDemand says what a demand asks, for messages.
func FormatDemand(d Demand) string {
	var parts []string
	if d.Memory > 0 {
		parts = append(parts, "memory "+governor.FormatBytes(d.Memory))
	}
	if d.GPUMemory > 0 {
		parts = append(parts, "GPU memory "+governor.FormatBytes(d.GPUMemory))
	}
	if d.GPUSlots > 0 {
		parts = append(parts, fmt.Sprintf("%d GPU slot(s)", d.GPUSlots))
	}
	parts = append(parts, fmt.Sprintf("%d thread(s)", max(d.Threads, 1)))
	return strings.Join(parts, ", ")
}
