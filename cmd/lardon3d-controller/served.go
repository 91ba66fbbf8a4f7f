package main

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/lardon3d/lardon3d-controller/pkg/listing"
	"github.com/lardon3d/lardon3d-controller/pkg/reconcile"
	"github.com/lardon3d/lardon3d-controller/pkg/registry"
	"github.com/lardon3d/lardon3d-controller/pkg/spool"
)

// rescanEvery is how often run looks again for the spools its patterns
// match: a user who makes a spool under the configured root is served
// within this, without root and without a restart.
const rescanEvery = 10 * time.Second

// servedSpools adds spools to the host, each locked, watched and listed
// for get: the ones run found at its start (add, before Run), and the new
// matches of its patterns while it runs (rescan, from one goroutine).
// Closed (close) once the host's Run returned.
type servedSpools struct {
	host    *reconcile.Host
	cfg     reconcile.Config
	fair    fairConfig
	opts    spool.Options
	log     zerolog.Logger
	claim   *registry.Held
	observe func(time.Duration, bool)
	// ctx ends the listing servers (no listing once the controller stops).
	ctx context.Context

	// mu serializes the additions and removals (rescan, the control
	// socket's spool-add and spool-remove) and guards what they change.
	mu      sync.Mutex
	placed  []placedSpool
	closers []func()
	// byDir are each spool's controller and closer (idempotent), for
	// spool-remove; requested are the spools added over the control
	// socket, with the uid of who asked.
	byDir     map[string]servedSpool
	requested map[string]int
	// failed is the last error of each spool a rescan could not add,
	// logged when it changes.
	failed map[string]string
	// watching ends when the watch goroutine does.
	watching sync.WaitGroup
}

// openedSpool is a spool checked, watched and locked, not served yet.
type openedSpool struct {
	placedSpool
	sp   *spool.Spool
	undo []func()
}

// openSpool checks and opens a spool (its mode, before anything is made
// for it), chooses its state directory (stateDir, else runStateDir), then
// takes its one-controller lock.
func openSpool(dir, stateDir string, opts spool.Options) (*openedSpool, error) {
	sp, err := spool.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	if stateDir == "" {
		if stateDir, err = runStateDir(dir); err != nil {
			sp.Close()
			return nil, err
		}
	}
	lock, err := spool.Lock(dir, stateDir)
	if err != nil {
		sp.Close()
		return nil, err
	}
	return &openedSpool{placedSpool: placedSpool{dir: dir, stateDir: stateDir}, sp: sp, undo: []func(){sp.Close, lock.Unlock}}, nil
}

// close undoes openSpool.
func (o *openedSpool) close() {
	for _, f := range o.undo {
		f()
	}
}

// serve adds an opened spool to the host: before Run (running false), or
// joining it; and serves get's listings of it.
func (s *servedSpools) serve(o *openedSpool, running bool) error {
	if running {
		return s.serveWith(o, s.cfg)
	}
	return s.place(o, s.cfg, false)
}

// serveWith joins an opened spool to the running host with cfg.
func (s *servedSpools) serveWith(o *openedSpool, cfg reconcile.Config) error {
	return s.place(o, cfg, true)
}

func (s *servedSpools) place(o *openedSpool, cfg reconcile.Config, running bool) error {
	c := cfg
	c.SpoolDir, c.StateDir = o.dir, o.stateDir
	c.Account = s.fair.accountOf(o.dir)
	var ctrl *reconcile.Controller
	if running {
		var err error
		if ctrl, err = s.host.Join(c, o.sp); err != nil {
			o.close()
			return err
		}
	} else {
		ctrl = s.host.Add(c, o.sp)
	}
	s.placed = append(s.placed, o.placedSpool)
	closeListing := func() {}
	ls, err := listing.Serve(o.stateDir, spoolAt(o.dir), ctrl, s.log, s.observe)
	if err != nil {
		s.log.Warn().Err(err).Str("spool", o.dir).Msg("get's listings not served; get reads the spool itself")
	} else {
		closeListing = ls.Close
		context.AfterFunc(s.ctx, ls.Close)
	}
	closeSpool := sync.OnceFunc(func() { closeListing(); o.close() })
	s.closers = append(s.closers, closeSpool)
	if s.byDir == nil {
		s.byDir = map[string]servedSpool{}
	}
	s.byDir[o.dir] = servedSpool{ctrl: ctrl, close: closeSpool}
	return nil
}

// servedSpool is one spool served: its controller and what closes it.
type servedSpool struct {
	ctrl  *reconcile.Controller
	close func()
}

// rescan adds the directories the entries match now and no spool served
// yet, and declares them in the machine's registry.
func (s *servedSpools) rescan(entries []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	found, skipped, err := expandSpools(entries)
	if err != nil {
		s.noteFailure("", err)
		return
	}
	for _, err := range skipped {
		s.noteFailure(err.Error(), err)
	}
	added := false
	for _, e := range found {
		if s.serves(e.dir) {
			continue
		}
		o, err := openSpool(e.dir, "", s.opts)
		if err == nil {
			err = s.serve(o, true)
		}
		if err != nil {
			s.noteFailure(e.dir, err)
			continue
		}
		delete(s.failed, e.dir)
		added = true
		s.log.Info().Str("spool", e.dir).Str("stateDir", o.stateDir).Msg("serving a new spool")
	}
	if added {
		spools, stateDirs := s.declared()
		if err := s.claim.Update(spools, stateDirs); err != nil {
			s.log.Warn().Err(err).Msg("the machine's registry does not list the new spools: get may say no controller serves them")
		}
	}
}

// watch rescans every rescanEvery, in a goroutine of its own, until ctx
// ends; close waits for it. From then on only that goroutine adds.
func (s *servedSpools) watch(ctx context.Context, entries []string) {
	s.watching.Add(1)
	go func() {
		defer s.watching.Done()
		s.rescanEvery(ctx, entries)
	}()
}

func (s *servedSpools) rescanEvery(ctx context.Context, entries []string) {
	t := time.NewTicker(rescanEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.rescan(entries)
		}
	}
}

func (s *servedSpools) serves(dir string) bool {
	for _, p := range s.placed {
		if p.dir == dir {
			return true
		}
	}
	return false
}

// declared is what the registry says this controller serves.
func (s *servedSpools) declared() ([]string, map[string]string) {
	spools := make([]string, 0, len(s.placed))
	stateDirs := make(map[string]string, len(s.placed))
	for _, p := range s.placed {
		spools = append(spools, p.dir)
		stateDirs[p.dir] = p.stateDir
	}
	return spools, stateDirs
}

func (s *servedSpools) noteFailure(dir string, err error) {
	if s.failed[dir] == err.Error() {
		return
	}
	s.failed[dir] = err.Error()
	s.log.Warn().Err(err).Str("spool", dir).Msg("a spool the patterns match is not served; retried every 10 s")
}

// close closes what add opened, last first, once the watch goroutine is
// gone. REQUIRES: its ctx ended.
func (s *servedSpools) close() {
	s.watching.Wait()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// dirs are the spools served.
func (s *servedSpools) dirs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	spools, _ := s.declared()
	return spools
}
