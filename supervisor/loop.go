package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// step is the level-triggered part of the loop: with no job running, it
// compares what was last observed with what the state wants and starts at
// most one job to close the gap.
func (s *Supervisor) step(bg context.Context) {
	if s.jobs.cur != nil {
		return
	}
	now := s.now()
	switch s.loop.state {
	case group.Starting:
		if s.loop.shutting {
			launch(s, bg, s.leaveWork(s.loop.memberLease))
		} else if !now.Before(s.loop.retryAt) {
			launch(s, bg, s.startupWork())
		}
	case group.Standby:
		switch {
		case s.loop.shutting:
			launch(s, bg, s.leaveWork(s.loop.memberLease))
		case s.loop.memberLease == 0:
			s.transition(group.Starting, "member_lease_lost", "member lease lost; re-registering")
		case len(s.enforceable(now)) > 0:
			running := s.enforceable(now)
			s.log.Warn("managed unit running on standby; stopping it", "units", running)
			launch(s, bg, s.enforceWork(running))
		case s.loop.leader.Present() && s.loop.leader.Lease == 0:
			launch(s, bg, s.clearKeyWork(s.loop.leader))
		case !s.loop.leader.Present() && s.mayCampaign(now):
			launch(s, bg, s.acquireWork(s.loop.memberLease))
		}
	case group.Promoting:
		// promote job finished without moving us on: only on shutdown.
		if s.loop.shutting {
			s.demote(bg, "shutdown", "shutdown requested", 0)
		}
	case group.Active:
		switch {
		case s.loop.shutting:
			s.demote(bg, "shutdown", "shutdown requested", 0)
		case s.seen.ctl.Freeze == nil && s.seen.ctl.Handoff != nil && s.seen.ctl.Handoff.Token == s.term.token:
			to := s.seen.ctl.Handoff.To
			if to == "" {
				to = "any other member"
			}
			s.demote(bg, "handoff", fmt.Sprintf("handoff %s requested to %s", s.seen.ctl.Handoff.ID, to), 0)
		case s.seen.ctl.Banned(s.cfg.Node):
			s.demote(bg, "banned", "this node was banned", 0)
		case len(s.watch.last) > 0 && len(runningUnits(s.watch.last)) < len(s.watch.last):
			launch(s, bg, s.restartWork())
		default:
			s.restartHung(bg, now)
		}
	}
}

// onJobDone hands a finished job to its own completion handler (done.go),
// after adopting the unit states the job read last. exit reports that Run
// must return err.
func (s *Supervisor) onJobDone(bg context.Context, e jobEnd) (err error, exit bool) {
	s.jobs.cur = nil
	s.jobs.lastEnd = s.now()
	// What was observed before the job may no longer be true: decide only
	// on the observation the job took after its last action (or wait for
	// the next poll if it could not read the units).
	s.watch.last, s.watch.lastAt = nil, time.Time{}
	if e.units.err == nil {
		s.noteUnits(e.units)
	}
	defer s.runPending(bg)
	return e.finish(bg)
}

// onShutdown handles SIGTERM: cancel what can be cancelled; step then
// demotes or leaves once the running job ends.
func (s *Supervisor) onShutdown(bg context.Context) (error, bool) {
	if s.jobs.cur != nil && s.jobs.cur.kind.cancelOnShutdown {
		s.jobs.cur.cancel()
	}
	return nil, false
}

// transition changes state and tells everyone who listens.
func (s *Supervisor) transition(to group.State, kind, reason string) {
	from := s.loop.state
	if from == to && reason == s.loop.reason {
		return
	}
	s.checkEdge(from, to)
	s.loop.prevState = from
	s.loop.state, s.loop.reason, s.loop.since = to, reason, s.now()
	if to != group.Active {
		s.health.DisarmAll() // only the active leader probes its units (monitor.go)
	}
	if !to.Holding() {
		s.silent.stop()
	}
	s.log.Info("transition", "from", from, "to", to, "reason", reason, "token", s.term.token)
	s.notify("STATUS=" + s.statusLine())
	s.recordHistory(group.Event{At: s.loop.since, Node: s.cfg.Node, From: from, To: to, Kind: kind, Reason: reason, Token: s.term.token})
	if s.opts.Observer != nil {
		s.opts.Observer(Transition{Node: s.cfg.Node, From: from, To: to, Kind: kind, Reason: reason, Token: s.term.token, At: s.loop.since})
	}
	s.updateSnapshot()
	offer(s.rec.wake, struct{}{})
}

func (s *Supervisor) statusLine() string {
	switch s.loop.state {
	case group.Active, group.Promoting, group.Demoting:
		return fmt.Sprintf("%s; token %d, lease valid %.1fs", s.loop.state, s.term.token, s.term.deadline.LeaseLeft(deadlineNow()).Seconds())
	case group.Standby:
		if s.loop.leader.Present() {
			return fmt.Sprintf("standby; leader %s, token %d", s.loop.leader.Node, s.loop.leader.Token)
		}
		return "standby; no leader"
	default:
		return fmt.Sprintf("%s; %s", s.loop.state, s.loop.reason)
	}
}

// drainRenewals applies renewal answers that have arrived but were not yet
// read: a proof already received must count before the loop fences.
func (s *Supervisor) drainRenewals() {
	for {
		select {
		case r := <-s.in.renewals:
			s.onRenewal(r)
		default:
			return
		}
	}
}

func (s *Supervisor) resetFenceTimer() {
	if !s.loop.state.Holding() && s.term.elecLease == 0 {
		return
	}
	left := s.term.deadline.Left(deadlineNow())
	if left < 0 {
		left = 0
	}
	s.loop.fenceTimer.Reset(left)
	// Under a backstop the pings stop before the fence instant: wake the
	// loop just before the last one allowed, so that the watchdog's kill,
	// should this process freeze after it, comes as late as it safely can
	// and an orderly fence has all of lease.slack to finish first.
	if s.window.Backstopped() && s.loop.pingTimer != nil {
		if by, ok := s.term.deadline.PingBy(); ok {
			s.loop.pingTimer.Reset(max(time.Until(by)-lastPingEarly, 0))
		}
	}
}

// lastPingEarly is how long before the term's PingBy the loop wakes for its
// last ping: enough for the pass to reach the ping before the instant.
const lastPingEarly = 5 * time.Millisecond
