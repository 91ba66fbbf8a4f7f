package main

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

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
	opts    spool.Options
	log     zerolog.Logger
	claim   *registry.Held
	observe func(time.Duration, bool)
	// ctx ends the listing servers (no listing once the controller stops).
	ctx context.Context

	placed  []placedSpool
	closers []func()
	// failed is the last error of each spool a rescan could not add,
	// logged when it changes.
	failed map[string]string
	// watching ends when the watch goroutine does.
	watching sync.WaitGroup
}

// add locks (unless locked, as at start), opens and adds a spool: before
// Run (running false), or joining it.
func (s *servedSpools) add(p placedSpool, locked, running bool) error {
	var undo []func()
	fail := func(err error) error {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return err
	}
	if !locked {
		lock, err := spool.Lock(p.dir, p.stateDir)
		if err != nil {
			return err
		}
		undo = append(undo, lock.Unlock)
	}
	sp, err := spool.Open(p.dir, s.opts)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, sp.Close)
	c := s.cfg
	c.SpoolDir, c.StateDir = p.dir, p.stateDir
	var ctrl *reconcile.Controller
	if running {
		if ctrl, err = s.host.Join(c, sp); err != nil {
			return fail(err)
		}
	} else {
		ctrl = s.host.Add(c, sp)
	}
	s.closers = append(s.closers, undo...)
	s.placed = append(s.placed, p)
	ls, err := serveListings(p.stateDir, p.dir, controllerRows{ctrl}, s.log, s.observe)
	if err != nil {
		s.log.Warn().Err(err).Str("spool", p.dir).Msg("get's listings not served; get reads the spool itself")
		return nil
	}
	s.closers = append(s.closers, ls.Close)
	context.AfterFunc(s.ctx, ls.Close)
	return nil
}

// rescan adds the directories the entries match now and no spool served
// yet, and declares them in the machine's registry.
func (s *servedSpools) rescan(entries []string) {
	dirs, err := expandSpools(entries)
	if err != nil {
		s.noteFailure("", err)
		return
	}
	added := false
	for _, dir := range dirs {
		if s.serves(dir) {
			continue
		}
		placed, err := placeSpools([]string{dir}, "")
		if err == nil {
			err = s.add(placed[0], false, true)
		}
		if err != nil {
			s.noteFailure(dir, err)
			continue
		}
		delete(s.failed, dir)
		added = true
		s.log.Info().Str("spool", dir).Str("stateDir", placed[0].stateDir).Msg("serving a new spool")
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
