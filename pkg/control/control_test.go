package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
)

// fakeBackend grants holds after waits reasons, counting each hold's
// releases; it records the spools asked.
type fakeBackend struct {
	waits    int
	granted  atomic.Int64
	released atomic.Int64
	twice    atomic.Int64 // a release called more than once
	mu       sync.Mutex
	added    []string
	peers    []Peer
	addedIno uint64
}

func (b *fakeBackend) Hold(ctx context.Context, p Peer, d Demand, waiting func(string)) (Grant, func(), error) {
	for i := range b.waits {
		waiting("WAIT " + string(rune('a'+i)))
	}
	if d.NoWait {
		return Grant{}, nil, errors.New("does not fit now")
	}
	if ctx.Err() != nil {
		return Grant{}, nil, ctx.Err()
	}
	id := b.granted.Add(1)
	var n atomic.Int64
	return Grant{ID: uint64(id), Memory: d.Memory, Threads: 1}, func() {
		if n.Add(1) > 1 {
			b.twice.Add(1)
		}
		b.released.Add(1)
	}, nil
}

func (b *fakeBackend) Budgets() (governor.BudgetsView, []HoldInfo) {
	return governor.BudgetsView{Reservations: int(b.granted.Load() - b.released.Load())}, []HoldInfo{{ID: 1, Command: "x"}}
}

func (b *fakeBackend) AddSpool(p Peer, dir *os.File, path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.added = append(b.added, path)
	b.peers = append(b.peers, p)
	b.addedIno = st.Ino
	return "/state", nil
}

func (b *fakeBackend) RemoveSpool(p Peer, path string) error {
	if path == "/refused" {
		return errors.New("no")
	}
	return nil
}

// serve starts a server on a fresh socket; its target names this process
// (the server's PID and user).
func serve(t *testing.T, b Backend) (*Server, Target) {
	t.Helper()
	dir := t.TempDir()
	srv, err := Listen(SocketPath(dir, os.Getpid()), b, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, Target{Claim: registry.Claim{PID: os.Getpid(), UID: os.Geteuid()}, Socket: srv.Path()}
}

func dial(t *testing.T, tg Target) *Conn {
	t.Helper()
	c, err := Dial(tg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestSocketIsWorldConnectable(t *testing.T) {
	srv, _ := serve(t, &fakeBackend{})
	st, err := os.Lstat(srv.Path())
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o666 {
		t.Fatalf("socket %v %v", st, err)
	}
	srv.Close()
	if _, err := os.Lstat(srv.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
}

// A hold's reasons reach the client in order, then its grant; the hold
// is released exactly once when the client's connection ends, whichever
// way, and never while it is open.
func TestHoldReleasedOnceWhenConnectionEnds(t *testing.T) {
	b := &fakeBackend{waits: 3}
	_, tg := serve(t, b)
	c := dial(t, tg)
	var reasons []string
	g, err := c.Hold(context.Background(), Demand{Memory: 3 << 30}, func(r string) { reasons = append(reasons, r) })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(reasons, ",") != "WAIT a,WAIT b,WAIT c" || g.Memory != 3<<30 {
		t.Fatalf("reasons %v, grant %+v", reasons, g)
	}
	time.Sleep(50 * time.Millisecond)
	if b.released.Load() != 0 {
		t.Fatal("released while the connection is open")
	}
	_ = c.Close()
	waitFor(t, "release", func() bool { return b.released.Load() == 1 })
	// A refused hold releases nothing and says why.
	c = dial(t, tg)
	if _, err := c.Hold(context.Background(), Demand{NoWait: true}, nil); err == nil || !strings.Contains(err.Error(), "does not fit now") {
		t.Errorf("no-wait: %v", err)
	}
	_ = c.Close()
	if b.twice.Load() != 0 || b.released.Load() != 1 {
		t.Errorf("released %d times (twice: %d)", b.released.Load(), b.twice.Load())
	}
}

// Many clients at once, ending by Close or by the server's Close: every
// grant released exactly once (-race).
func TestManyHoldsReleasedExactlyOnce(t *testing.T) {
	b := &fakeBackend{waits: 1}
	srv, tg := serve(t, b)
	var wg sync.WaitGroup
	var kept []*Conn
	var mu sync.Mutex
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Dial(tg)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := c.Hold(context.Background(), Demand{Memory: 1}, func(string) {}); err != nil {
				t.Error(err)
				_ = c.Close()
				return
			}
			if i%2 == 0 {
				_ = c.Close()
				return
			}
			mu.Lock()
			kept = append(kept, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	waitFor(t, "half released", func() bool { return b.released.Load() == 30 })
	srv.Close() // the others: released by the server's end
	if b.released.Load() != 60 || b.granted.Load() != 60 || b.twice.Load() != 0 {
		t.Errorf("granted %d, released %d, twice %d", b.granted.Load(), b.released.Load(), b.twice.Load())
	}
	for _, c := range kept {
		_ = c.Close()
	}
}

// A client checks the server is the controller registered: a socket
// served by another process (here: a claim naming PID 1) is never sent
// a request.
func TestDialRefusesAPlantedSocket(t *testing.T) {
	b := &fakeBackend{}
	_, tg := serve(t, b)
	tg.Claim.PID = 1
	if _, err := Dial(tg); err == nil || !strings.Contains(err.Error(), "not by the controller registered") {
		t.Fatalf("dial of a socket of another PID: %v", err)
	}
	tg.Claim.PID, tg.Claim.UID = os.Getpid(), 4242
	if _, err := Dial(tg); err == nil {
		t.Fatal("dial of a socket of another user accepted")
	}
}

// Bad requests are answered with an error line, never a crash, and the
// server serves on.
func TestBadRequestsAreRefused(t *testing.T) {
	b := &fakeBackend{}
	_, tg := serve(t, b)
	for _, line := range []string{
		"not json\n",
		`{"protocol":1,"op":"launch"}` + "\n",
		`{"protocol":9,"op":"budgets"}` + "\n",
		`{"protocol":1,"op":"hold"}` + "\n",
		`{"protocol":1,"op":"budgets","extra":1}` + "\n",
		`{"protocol":1,"op":"spool-add","spool":"/x"}` + "\n", // no descriptor
		strings.Repeat("x", maxRequest+10),
	} {
		c, err := net.Dial("unix", tg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte(line))
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		reply, err := bufio.NewReader(c).ReadBytes('\n')
		_ = c.Close()
		var r Reply
		if err != nil || json.Unmarshal(reply, &r) != nil || r.Event != EventError {
			t.Errorf("request %.40q: reply %q, %v", line, reply, err)
		}
	}
	c := dial(t, tg)
	defer c.Close()
	r, err := c.Budgets()
	if err != nil || r.Budgets == nil || len(r.Holds) != 1 {
		t.Errorf("budgets after bad requests: %+v, %v", r, err)
	}
}

// spool add sends the directory this process opened, by its real path;
// the backend gets that very directory (its inode) and the peer's
// credentials from the kernel.
func TestAddSpoolSendsTheOpenedDirectory(t *testing.T) {
	b := &fakeBackend{}
	_, tg := serve(t, b)
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	c := dial(t, tg)
	r, err := c.AddSpool(link)
	_ = c.Close()
	if err != nil || r.StateDir != "/state" {
		t.Fatalf("add: %+v %v", r, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.added) != 1 || b.added[0] != real || b.addedIno != st.Ino {
		t.Errorf("added %v (inode %d), want %s (inode %d)", b.added, b.addedIno, real, st.Ino)
	}
	if p := b.peers[0]; p.PID != os.Getpid() || p.UID != os.Geteuid() {
		t.Errorf("peer %+v", p)
	}
	c = dial(t, tg)
	defer c.Close()
	if err := c.RemoveSpool("/refused"); err == nil {
		t.Error("a refused removal reported success")
	}
}

// One user's many connections do not lock the others out: beyond the
// per-user cap, that user's connections are closed unanswered.
func TestConnectionsCappedPerUser(t *testing.T) {
	b := &fakeBackend{}
	_, tg := serve(t, b)
	var conns []*Conn
	for range maxConnsPerUID {
		c := dial(t, tg)
		if _, err := c.Hold(context.Background(), Demand{}, nil); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	c := dial(t, tg)
	if _, err := c.Budgets(); err == nil {
		t.Error("a connection beyond the per-user cap was served")
	}
	_ = c.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	waitFor(t, "releases", func() bool { return b.released.Load() == maxConnsPerUID })
	c = dial(t, tg)
	defer c.Close()
	if _, err := c.Budgets(); err != nil {
		t.Errorf("after the others closed: %v", err)
	}
}
