package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
)

// fence stops every unit at once with SIGKILL escalation and returns the
// FenceError Run must return. It never starts anything again.
func (s *Supervisor) fence(bg context.Context, kind, reason string) error {
	start := time.Now()
	s.fenceNow, s.fenceKind = "", ""
	s.cutAPI()
	if s.job != nil {
		s.job.cancel()
	}
	// Wait (briefly) for an in-flight start call to return so that our stop
	// jobs are queued after it and replace it.
	s.gate.closeWait(200 * time.Millisecond)
	s.transition(Fencing, kind, reason)
	s.updateSnapshot()
	s.log.Error("FENCING", "reason", reason, "token", s.token, "lease_left", s.deadline.LeaseLeft(start).Round(time.Millisecond))

	// Keep pinging the watchdog while fencing: the stop jobs are queued,
	// the work is bounded, and a watchdog kill now would only lose the
	// record, the history and the hook.
	pingDone := make(chan struct{})
	go func() {
		t := time.NewTicker(tickEvery)
		defer t.Stop()
		for {
			select {
			case <-pingDone:
				return
			case <-t.C:
				s.notify("WATCHDOG=1")
			}
		}
	}()
	defer close(pingDone)
	ctx, cancel := context.WithTimeout(bg, s.timeout.StopMax()+time.Second)
	err := fencing.Fence(ctx, s.units, s.cfg.Units.Managed, s.timeout)
	cancel()
	// A second look: something may have started behind our back or the
	// cancelled start may have landed after the stop.
	vctx, vcancel := context.WithTimeout(bg, s.timeout.StopMax())
	states, serr := s.units.States(vctx, s.cfg.Units.Managed)
	if serr == nil && len(runningUnits(states)) > 0 {
		err = errors.Join(err, fencing.Fence(vctx, s.units, runningUnits(states), s.timeout))
		states, serr = s.units.States(vctx, s.cfg.Units.Managed)
	}
	vcancel()
	if serr != nil {
		err = errors.Join(err, fmt.Errorf("confirm stopped: %w", serr))
	} else if r := runningUnits(states); len(r) > 0 {
		err = errors.Join(err, fmt.Errorf("still running after fence: %v", r))
	}
	took := time.Since(start)
	fe := &FenceError{Reason: reason, Incomplete: err}
	if err == nil {
		s.unitsMayRun.Store(false)
		s.log.Error("fenced: units stopped", "reason", reason, "took", took.Round(time.Millisecond), "stop_budget", s.timeout.StopMax())
	} else {
		s.log.Error("fenced: units NOT confirmed stopped", "reason", reason, "took", took.Round(time.Millisecond), "err", err)
	}
	// Best effort, after the units are down: tell the others, run the hook,
	// give back the election lease if etcd still listens.
	// The lease is not revoked: the others wait it out, exactly as they
	// would if we had simply gone silent.
	pctx, pcancel := context.WithTimeout(bg, s.cfg.Etcd.RequestTimeout.D())
	_ = s.writeRecord(pctx, false)
	outcome := fmt.Sprintf("units stopped in %s", took.Round(time.Millisecond))
	if err != nil {
		outcome = "units NOT confirmed stopped: " + err.Error()
	}
	_ = AppendHistory(pctx, s.cli, s.keys, Event{At: time.Now(), Node: s.cfg.Node, From: Fencing, To: Fenced, Kind: kind, Reason: outcome, Token: s.token}, s.cfg.History.Retain)
	pcancel()
	s.runHook(bg, "on_fence", s.token)
	return fe
}
