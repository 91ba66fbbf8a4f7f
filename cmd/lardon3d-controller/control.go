package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/lardon3d/lardon3d-controller/pkg/control"
	"github.com/lardon3d/lardon3d-controller/pkg/governor"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
)

// controlBackend is what the control socket serves: the host's holds and
// budgets, and the spools users add and remove.
type controlBackend struct {
	host   *reconcile.Host
	served *servedSpools
}

var _ control.Backend = controlBackend{}

// startControl serves the control socket beside the claim. A controller
// without one runs on (exec and spool add then say no controller answers).
func startControl(claim *registry.Held, host *reconcile.Host, served *servedSpools, log zerolog.Logger) *control.Server {
	path := control.SocketPath(filepath.Dir(claim.Path()), os.Getpid())
	srv, err := control.Listen(path, controlBackend{host: host, served: served}, log)
	if err != nil {
		log.Warn().Err(err).Msg("no control socket: exec and spool add cannot reach this controller")
		return nil
	}
	log.Info().Str("socket", path).Msg("control socket")
	return srv
}

func (b controlBackend) Hold(ctx context.Context, p control.Peer, d control.Demand, waiting func(string)) (control.Grant, func(), error) {
	return b.host.Hold(ctx, p, d, waiting)
}

func (b controlBackend) Budgets() (governor.BudgetsView, []control.HoldInfo) {
	return b.host.Budgets(), b.host.Holds()
}

// AddSpool serves the directory the peer opened, as its owner's: refused
// unless the peer owns it (root may add anyone's), the path names that
// very directory with no symlink on the way, and the spool opened is it.
func (b controlBackend) AddSpool(p control.Peer, dir *os.File, path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(dir.Fd()), &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", errors.New("not a directory")
	}
	if p.UID != 0 && st.Uid != uint32(p.UID) {
		return "", fmt.Errorf("spool %s is owned by uid %d, not by you (uid %d): a user may add only their own spool", path, st.Uid, p.UID)
	}
	if euid := os.Geteuid(); euid != 0 && st.Uid != uint32(euid) {
		return "", fmt.Errorf("spool %s is owned by uid %d: this controller runs as uid %d and runs only its own user's tasks", path, st.Uid, euid)
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return "", fmt.Errorf("spool %q: want an absolute, clean path", path)
	}
	if real, err := filepath.EvalSymlinks(path); err != nil || real != path {
		return "", fmt.Errorf("spool %s: the path has a symlink on the way or is gone: give the directory's real path", path)
	}
	if err := sameDir(path, &st); err != nil {
		return "", err
	}
	select {
	case <-b.host.Started():
	case <-time.After(time.Minute):
		return "", errors.New("the controller is still starting: try again")
	}
	return b.served.addRequested(path, &st, p.UID)
}

// sameDir checks that path, opened without following a last symlink, is
// the directory st describes.
func sameDir(path string, st *unix.Stat_t) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("spool %s: %w", path, err)
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return fmt.Errorf("spool %s: the path does not name the directory that was opened (it was swapped)", path)
	}
	return nil
}

func (b controlBackend) RemoveSpool(p control.Peer, path string) error {
	return b.served.removeRequested(path, p.UID)
}

// addRequested serves a spool a user asked for: opened, checked to be the
// directory st describes (the spool's own descriptor), its tasks run as
// st's owner, and declared in the registry.
func (s *servedSpools) addRequested(dir string, st *unix.Stat_t, by int) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.serves(dir) {
		return "", fmt.Errorf("spool %s is already served by this controller", dir)
	}
	o, err := openSpool(dir, "", s.opts)
	if err != nil {
		return "", err
	}
	got, err := o.sp.Stat()
	if err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
		o.close()
		return "", fmt.Errorf("spool %s: the directory opened is not the one checked (it was swapped)", dir)
	}
	owner := st.Uid
	cfg := s.cfg
	cfg.SpoolOwner = &owner
	if err := s.serveWith(o, cfg); err != nil {
		return "", err
	}
	if s.requested == nil {
		s.requested = map[string]int{}
	}
	s.requested[dir] = by
	spools, stateDirs := s.declared()
	if err := s.claim.Update(spools, stateDirs); err != nil {
		s.log.Warn().Err(err).Msg("the machine's registry does not list the new spool: get may say no controller serves it")
	}
	s.log.Info().Str("spool", dir).Str("stateDir", o.stateDir).Int("uid", by).Msg("serving a spool added over the control socket")
	return o.stateDir, nil
}

// removeRequested stops serving a spool added over the control socket:
// by who added it, its owner, or root.
func (s *servedSpools) removeRequested(dir string, by int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	who, ok := s.requested[dir]
	sv := s.byDir[dir]
	if !ok || sv.ctrl == nil {
		return fmt.Errorf("spool %s was not added with spool add to this controller", dir)
	}
	if by != 0 && by != who {
		return fmt.Errorf("spool %s was added by uid %d: only they or root may remove it", dir, who)
	}
	if err := s.host.Leave(sv.ctrl); err != nil {
		return err
	}
	sv.close()
	delete(s.requested, dir)
	delete(s.byDir, dir)
	s.placed = slices.DeleteFunc(s.placed, func(p placedSpool) bool { return p.dir == dir })
	spools, stateDirs := s.declared()
	if err := s.claim.Update(spools, stateDirs); err != nil {
		s.log.Warn().Err(err).Msg("the machine's registry still lists the removed spool")
	}
	s.log.Info().Str("spool", dir).Int("uid", by).Msg("spool removed over the control socket")
	return nil
}
