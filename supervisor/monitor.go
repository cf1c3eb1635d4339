package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
)

// onUnits records the managed units' states and counts failures on the
// leader.
func (s *Supervisor) onUnits(bg context.Context, o unitObs) {
	if s.job != nil || o.started.Before(s.lastJobEnd) {
		return // in flux, or read before the last job changed things
	}
	if o.err != nil {
		// Not seeing the units is not the same as their being stopped.
		s.log.Warn("cannot read managed units", "err", o.err)
		return
	}
	s.noteUnits(o)
	s.assessUnits(bg, o)
}

// assessUnits counts failures on the leader: a unit not running, or one
// systemd restarted since the last look. Reaching the threshold demotes.
func (s *Supervisor) assessUnits(bg context.Context, o unitObs) {
	if s.state != Active {
		return
	}
	now := s.now()
	for _, u := range o.states {
		base, seen := s.restarts[u.Name]
		s.restarts[u.Name] = u.NRestarts
		switch {
		case !u.Running():
			s.failed(now, fmt.Sprintf("%s is %s", u.Name, u.ActiveState))
		case seen && u.NRestarts > base:
			s.failed(now, fmt.Sprintf("%s was restarted by systemd (%d restarts)", u.Name, u.NRestarts))
		}
	}
	if n := s.recentFailures(now); n >= s.cfg.Units.FailureThreshold {
		s.demote(bg, "failure_threshold", fmt.Sprintf("%d unit failures within %s (threshold %d)", n, s.cfg.Units.FailureWindow, s.cfg.Units.FailureThreshold), s.cfg.Units.Cooldown.D())
	}
}

func (s *Supervisor) failed(now time.Time, what string) {
	s.failures = append(s.failures, now)
	s.log.Warn("managed unit failure", "what", what, "failures", s.recentFailures(now), "threshold", s.cfg.Units.FailureThreshold)
}

// recentFailures counts failures inside the failure window, dropping older
// ones.
func (s *Supervisor) recentFailures(now time.Time) int {
	cut := now.Add(-s.cfg.Units.FailureWindow.D())
	i := 0
	for i < len(s.failures) && s.failures[i].Before(cut) {
		i++
	}
	s.failures = s.failures[i:]
	return len(s.failures)
}

func unitsSignature(states []fencing.UnitState) string {
	var b []byte
	for _, u := range states {
		b = append(b, u.Name...)
		b = append(b, '=')
		b = append(b, u.ActiveState...)
		b = append(b, ';')
	}
	return string(b)
}

// noteUnits adopts a unit observation and republishes the record when the
// states changed, so status and the other members see them.
func (s *Supervisor) noteUnits(o unitObs) {
	s.lastUnits, s.unitsSeen = o.states, o.started
	if sig := unitsSignature(o.states); sig != s.publishedUnits {
		s.publishedUnits = sig
		s.updateSnapshot()
		offer(s.pub, struct{}{})
	}
}

type unitObs struct {
	started time.Time
	states  []fencing.UnitState
	err     error
}

// observeUnits polls the managed units' states.
func (s *Supervisor) observeUnits(bg context.Context) {
	for {
		offer(s.unitObs, s.readUnits(bg))
		if sleep(bg, s.cfg.Units.PollInterval.D()) != nil {
			return
		}
	}
}

// readUnits reads the managed units' states once, bounded by the poll
// interval.
func (s *Supervisor) readUnits(bg context.Context) unitObs {
	started := s.now()
	ctx, cancel := context.WithTimeout(bg, s.cfg.Units.PollInterval.D())
	defer cancel()
	states, err := s.units.States(ctx, s.cfg.Units.Managed)
	return unitObs{started: started, states: states, err: err}
}
