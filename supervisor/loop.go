package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
)

// step is the level-triggered part of the loop: with no job running, it
// compares what was last observed with what the state wants and starts at
// most one job to close the gap.
func (s *Supervisor) step(bg context.Context) {
	if s.job != nil {
		return
	}
	now := time.Now()
	switch s.state {
	case Starting:
		if s.shutting {
			s.start(bg, "leave", s.leaveJob(s.memberLease))
		} else if !now.Before(s.retryAt) {
			s.start(bg, "startup", s.startupJob)
		}
	case Standby:
		switch {
		case s.shutting:
			s.start(bg, "leave", s.leaveJob(s.memberLease))
		case s.memberLease == 0:
			s.transition(Starting, "member_lease_lost", "member lease lost; re-registering")
		case len(s.enforceable(now)) > 0:
			running := s.enforceable(now)
			s.log.Warn("managed unit running on standby; stopping it", "units", running)
			s.start(bg, "enforce", func(ctx context.Context) (any, error) {
				return nil, fencing.StopAll(ctx, s.units, running, s.timeout)
			})
		case s.leader.Present() && s.leader.Lease == 0:
			s.start(bg, "clear_key", s.clearLeaselessKey(s.leader))
		case !s.leader.Present() && s.mayCampaign(now):
			s.start(bg, "acquire", s.acquireJob)
		}
	case Promoting:
		// promote job finished without moving us on: only on shutdown.
		if s.shutting {
			s.demote(bg, "shutdown", "shutdown requested", 0)
		}
	case Active:
		switch {
		case s.shutting:
			s.demote(bg, "shutdown", "shutdown requested", 0)
		case s.ctl.Freeze == nil && s.ctl.Handoff != nil && s.ctl.Handoff.Token == s.token:
			to := s.ctl.Handoff.To
			if to == "" {
				to = "any other member"
			}
			s.demote(bg, "handoff", fmt.Sprintf("handoff %s requested to %s", s.ctl.Handoff.ID, to), 0)
		case s.ctl.Banned(s.cfg.Node):
			s.demote(bg, "banned", "this node was banned", 0)
		case len(s.lastUnits) > 0 && len(runningUnits(s.lastUnits)) < len(s.lastUnits):
			s.start(bg, "restart", func(ctx context.Context) (any, error) {
				return nil, s.gate.do(func() error { return fencing.StartAll(ctx, s.units, s.cfg.Units.Managed, s.timeout) })
			})
		}
	}
}

// onJobDone moves the state machine on when a job ends. exit reports that
// Run must return err.
func (s *Supervisor) onJobDone(bg context.Context, r jobResult) (err error, exit bool) {
	s.job = nil
	s.lastJobEnd = time.Now()
	// What was observed before the job may no longer be true: decide only
	// on the observation the job took after its last action (or wait for
	// the next poll if it could not read the units).
	s.lastUnits, s.unitsSeen = nil, time.Time{}
	if r.units.err == nil {
		s.noteUnits(r.units)
	}
	defer s.runPending(bg)
	switch r.name {
	case "startup":
		if r.err != nil {
			s.log.Error("start-up failed; retrying", "err", r.err)
			s.retryAt = time.Now().Add(s.cfg.Lease.RenewInterval.D())
			return nil, false
		}
		res := r.val.(grantResult)
		s.memberLease = res.lease
		s.deadline.Renewed(memberLease, res.sent, res.ttl)
		s.startRenewer(bg, memberLease, res.lease)
		if res.crashed {
			// Our previous incarnation died holding its records; they
			// lapse at about the time its election key does. Give the
			// members that stayed healthy a head start instead of racing
			// them for the key as an equal.
			s.cooldown = time.Now().Add(2*s.cfg.Lease.RenewInterval.D() + s.cfg.Units.PollInterval.D())
		}
		s.transition(Standby, "registered", "registered; units stopped")
		s.notify("READY=1")
	case "acquire":
		if r.err != nil {
			s.log.Warn("campaign failed", "err", r.err)
			return nil, false
		}
		res := r.val.(acquireResult)
		if !res.won {
			s.leader = res.leader
			s.notePrevHolder(res.leader)
			return nil, false
		}
		s.elecLease, s.token = res.lease, res.token
		s.deadline.Renewed(electionLease, res.sent, res.ttl)
		s.resetFenceTimer()
		s.startRenewer(bg, electionLease, res.lease)
		s.leader = LeaderInfo{Node: s.cfg.Node, Token: res.token, Lease: res.lease, Revision: res.token}
		s.failures, s.restarts = nil, map[string]uint32{}
		s.transition(Promoting, "elected", fmt.Sprintf("won the election key (token %d)", res.token))
		if s.shutting {
			s.demote(bg, "shutdown", "shutdown requested", 0)
			return nil, false
		}
		s.startsAllowed.Store(false)
		s.gate.open()
		s.start(bg, "promote", s.promoteJob(s.token, s.barrierHolder()))
	case "promote":
		switch {
		case s.state != Promoting:
			// cancelled by a demotion already under way
		case s.shutting:
			s.demote(bg, "shutdown", "shutdown requested", 0)
		case r.err != nil:
			s.demote(bg, "promotion_failed", "promotion failed: "+r.err.Error(), s.cfg.Units.Cooldown.D())
		default:
			s.transition(Active, "units_started", "units started")
			if h := s.ctl.Handoff; h != nil && h.Token != s.token {
				go s.clearHandoff(bg, h.ID)
			}
		}
	case "restart":
		if errors.Is(r.err, fencing.ErrStopPending) {
			// An operator is stopping the supervisor: systemd stopped the
			// bound units first and refused our start rather than cancel
			// that stop. SIGTERM follows; this is no unit failure.
			s.log.Info("restart refused: a stop of kha-supervisor is pending", "err", r.err)
			return nil, false
		}
		// Judge the restart by what runs now, not by the job's error, so
		// one failure is never counted twice.
		if r.units.err == nil {
			s.assessUnits(bg, r.units)
		} else if r.err != nil && s.state == Active {
			s.failed(time.Now(), r.err.Error())
		}
	case "clear_key":
		if r.err != nil {
			s.log.Error("could not delete the election key put without a lease", "err", r.err)
		}
	case "enforce":
		if r.err != nil {
			s.log.Error("could not stop a unit on standby", "err", r.err)
		}
	case "demote":
		if r.err != nil {
			return s.fenceNoted(bg, "demote_failed", "demotion could not confirm units stopped: "+r.err.Error()), true
		}
		s.stopRenewer(electionLease)
		s.deadline.Forget(electionLease)
		s.elecLease, s.token = 0, 0
		s.leader = LeaderInfo{}
		if s.shutting {
			// Leave too, so that a restarted supervisor (an upgrade) finds
			// no record of ours to wait for.
			s.start(bg, "leave", s.leaveJob(s.memberLease))
			return nil, false
		}
		s.transition(Standby, "released", s.reason)
	case "leave":
		s.transition(Stopped, "shutdown", "units stopped, lease released, left the group")
		return nil, true
	}
	return nil, false
}

// onShutdown handles SIGTERM: cancel what can be cancelled; step then
// demotes or leaves once the running job ends.
func (s *Supervisor) onShutdown(bg context.Context) (error, bool) {
	if s.job != nil {
		switch s.job.name {
		case "promote", "restart", "enforce":
			s.job.cancel()
		}
	}
	return nil, false
}

// transition changes state and tells everyone who listens.
func (s *Supervisor) transition(to State, kind, reason string) {
	from := s.state
	if from == to && reason == s.reason {
		return
	}
	s.checkEdge(from, to)
	s.prevState = from
	s.state, s.reason, s.since = to, reason, time.Now()
	if to != Active {
		s.health.DisarmAll() // only the active leader probes its units (monitor.go)
	}
	s.log.Info("transition", "from", from, "to", to, "reason", reason, "token", s.token)
	s.notify("STATUS=" + s.statusLine())
	s.recordHistory(Event{At: s.since, Node: s.cfg.Node, From: from, To: to, Kind: kind, Reason: reason, Token: s.token})
	if s.opts.Observer != nil {
		s.opts.Observer(Transition{Node: s.cfg.Node, From: from, To: to, Kind: kind, Reason: reason, Token: s.token, At: s.since})
	}
	s.updateSnapshot()
	offer(s.pub, struct{}{})
}

func (s *Supervisor) statusLine() string {
	switch s.state {
	case Active, Promoting, Demoting:
		return fmt.Sprintf("%s; token %d, lease valid %.1fs", s.state, s.token, s.deadline.LeaseLeft(time.Now()).Seconds())
	case Standby:
		if s.leader.Present() {
			return fmt.Sprintf("standby; leader %s, token %d", s.leader.Node, s.leader.Token)
		}
		return "standby; no leader"
	default:
		return fmt.Sprintf("%s; %s", s.state, s.reason)
	}
}

// drainRenewals applies renewal answers that have arrived but were not yet
// read: a proof already received must count before the loop fences.
func (s *Supervisor) drainRenewals() {
	for {
		select {
		case r := <-s.renewals:
			s.onRenewal(r)
		default:
			return
		}
	}
}

func (s *Supervisor) resetFenceTimer() {
	if !s.state.Holding() && s.elecLease == 0 {
		return
	}
	left := s.deadline.Left(time.Now())
	if left < 0 {
		left = 0
	}
	s.fenceTimer.Reset(left)
}
