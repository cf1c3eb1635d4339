package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
)

// Each job as a work value: its body (in the file of its subject) and its
// completion handler, here. The handlers are the lifecycle's job-driven
// edges; step (loop.go) takes the others. Every edge either takes is in the
// table in state.go.

func (s *Supervisor) startupWork() work[registration] {
	return work[registration]{kind: jobStartup, run: s.startupJob, done: s.startupDone}
}

// startupDone: registered (Starting -> Standby), or retry after a renew
// interval.
func (s *Supervisor) startupDone(bg context.Context, o outcome[registration]) (error, bool) {
	if o.err != nil {
		s.log.Error("start-up failed; retrying", "err", o.err)
		s.loop.retryAt = s.now().Add(s.cfg.Lease.RenewInterval)
		return nil, false
	}
	res := o.val
	s.loop.memberLease = res.lease.id
	s.term.deadline.Renewed(memberLease, res.lease.sent, res.lease.ttl)
	s.startRenewer(bg, memberLease, res.lease.id)
	s.adoptPredecessorHolder(res.holder, res.rev)
	if res.crashed {
		// Our previous incarnation died holding its records; they lapse
		// at about the time its election key does. Give the members that
		// stayed healthy a head start instead of racing them for the key
		// as an equal.
		s.loop.cooldown = s.now().Add(crashCooldown(s.cfg.Lease.RenewInterval, s.cfg.Units.PollInterval))
	}
	s.transition(group.Standby, "registered", "registered; units stopped")
	s.notify("READY=1")
	return nil, false
}

func (s *Supervisor) acquireWork(member clientv3.LeaseID) work[acquireResult] {
	run := func(ctx context.Context) (acquireResult, error) { return s.acquireJob(ctx, member) }
	return work[acquireResult]{kind: jobAcquire, run: run, done: s.acquireDone}
}

// acquireDone: lost (note who won), or won (Standby -> Promoting, then the
// promotion starts).
func (s *Supervisor) acquireDone(bg context.Context, o outcome[acquireResult]) (error, bool) {
	if o.err != nil {
		s.log.Warn("campaign failed", "err", o.err)
		return nil, false
	}
	res := o.val
	if res.memberGone {
		s.log.Warn("member lease gone before the campaign; registering again first", "lease", fmt.Sprintf("%x", res.member))
		s.dropMemberLease()
		return nil, false
	}
	if !res.won {
		s.loop.leader = res.leader
		s.notePrevHolder(res.leader)
		return nil, false
	}
	// While still standby: a NotFound for the member lease already queued
	// drops it now (and is checked below) instead of being read once this
	// node holds the key, where it would fence.
	s.drainRenewals()
	s.term.elecLease, s.term.token = res.lease.id, res.token
	s.term.deadline.Renewed(electionLease, res.lease.sent, res.lease.ttl)
	s.resetFenceTimer()
	s.startRenewer(bg, electionLease, res.lease.id)
	s.loop.leader = group.LeaderInfo{Node: s.cfg.Node, Token: res.token, Lease: res.lease.id, Revision: res.token}
	s.watch.failures, s.watch.restarts = nil, map[string]uint32{}
	s.transition(group.Promoting, "elected", fmt.Sprintf("won the election key (token %d)", res.token))
	switch {
	case s.loop.shutting:
		s.demote(bg, "shutdown", "shutdown requested", 0)
		return nil, false
	case s.loop.memberLease != res.member:
		// The renewer found the member lease gone while the campaign ran:
		// the promotion's record write rides on that lease and could only
		// fail (then cool down). Give the key back now and register again.
		s.demote(bg, "member_lease_lost", fmt.Sprintf("member lease %x lost during the campaign; giving the win back to register again", res.member), 0)
		return nil, false
	}
	s.term.view.allowStarts(false)
	s.term.gate.open()
	s.silent.start(bg) // silent.go: beside the barrier and the start, delaying neither
	launch(s, bg, s.promoteWork(s.term.token, s.barrierHolder()))
	return nil, false
}

func (s *Supervisor) promoteWork(token int64, prev holderMark) work[*promotionSteps] {
	return work[*promotionSteps]{kind: jobPromote, run: s.promoteJob(token, prev), done: s.promoteDone}
}

// promoteDone: units started (Promoting -> Active), or the promotion is
// undone (Promoting -> Demoting).
func (s *Supervisor) promoteDone(bg context.Context, o outcome[*promotionSteps]) (error, bool) {
	switch {
	case s.loop.state != group.Promoting:
		// cancelled by a demotion already under way
	case s.loop.shutting:
		s.demote(bg, "shutdown", "shutdown requested", 0)
	case o.err != nil:
		s.log.Info("promotion steps", "steps", o.val.String())
		s.demote(bg, "promotion_failed", "promotion failed: "+o.err.Error(), s.cfg.Units.Cooldown)
	default:
		s.transition(group.Active, "units_started", unitsStartedReason(o.val))
		if h := s.seen.ctl.Handoff; h != nil && h.Token != s.term.token {
			go s.clearHandoff(bg, h.ID)
		}
	}
	return nil, false
}

func (s *Supervisor) restartWork() work[struct{}] {
	run := func(ctx context.Context) error {
		return s.term.gate.do(func() error { return fencing.StartAll(ctx, s.units, s.cfg.Units.Managed, s.timeout) })
	}
	return work[struct{}]{kind: jobRestart, run: noResult(run), done: s.restartDone}
}

// restartHung restarts in place the units whose probe found them hung
// (hungUnits), checked on every loop iteration so that a hang costs the
// probe's detection and the unit's restart, not a unit poll more; or
// demotes when their failures reach the threshold.
func (s *Supervisor) restartHung(bg context.Context, now time.Time) {
	hung := s.hungUnits(now)
	if len(hung) == 0 || s.demoteAtThreshold(bg, now) {
		return
	}
	s.log.Warn("restarting hung units in place", "units", hung)
	launch(s, bg, s.restartHungWork(hung))
}

// restartHungWork stops the hung units (SIGTERM, SIGKILL after
// stop_timeout: systemd sends SIGCONT with the SIGTERM, so a stopped
// process ends too) and starts them again. The start runs through the
// start gate and only while the published term may act (the guard's own
// predicate): a restart never starts a unit where the node may not.
func (s *Supervisor) restartHungWork(hung []string) work[struct{}] {
	run := func(ctx context.Context) error {
		if err := fencing.StopAll(ctx, s.units, hung, s.timeout); err != nil {
			return err
		}
		start := func() error {
			return s.term.gate.do(func() error {
				if why := s.Term().Closed(time.Now()); why != "" {
					return fmt.Errorf("restart of %v not started: %s", hung, why)
				}
				return fencing.StartAll(ctx, s.units, hung, s.timeout)
			})
		}
		// A stop confirmed from the unit's cgroup (a process that ignored
		// SIGTERM, SIGKILLed by us) can return while systemd's own stop job
		// is still queued: systemd then refuses the start as destructive.
		// Our own stop, not an operator's: retry until it has ended, within
		// the stop budget (a stop of kha-supervisor itself is followed by
		// SIGTERM, which cancels this job).
		until := time.Now().Add(s.timeout.StopMax())
		for {
			err := start()
			if !errors.Is(err, fencing.ErrStopPending) || time.Now().After(until) {
				return err
			}
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return work[struct{}]{kind: jobRestart, run: noResult(run), done: s.restartDone}
}

// restartDone judges a restart of the leader's units by what runs now.
func (s *Supervisor) restartDone(bg context.Context, o outcome[struct{}]) (error, bool) {
	if errors.Is(o.err, fencing.ErrStopPending) {
		// An operator is stopping the supervisor: systemd stopped the
		// bound units first and refused our start rather than cancel that
		// stop. SIGTERM follows; this is no unit failure.
		s.log.Info("restart refused: a stop of kha-supervisor is pending", "err", o.err)
		return nil, false
	}
	// Judge the restart by what runs now, not by the job's error, so one
	// failure is never counted twice.
	if o.units.err == nil {
		s.assessUnits(bg, o.units)
	} else if o.err != nil && s.loop.state == group.Active {
		s.failed(s.now(), o.err.Error())
	}
	return nil, false
}

func (s *Supervisor) clearKeyWork(li group.LeaderInfo) work[struct{}] {
	return work[struct{}]{kind: jobClearKey, run: noResult(s.clearLeaselessKey(li)), done: s.clearKeyDone}
}

func (s *Supervisor) clearKeyDone(_ context.Context, o outcome[struct{}]) (error, bool) {
	if o.err != nil {
		s.log.Error("could not delete the election key put without a lease", "err", o.err)
	}
	return nil, false
}

func (s *Supervisor) enforceWork(running []string) work[struct{}] {
	run := func(ctx context.Context) error { return fencing.StopAll(ctx, s.units, running, s.timeout) }
	return work[struct{}]{kind: jobEnforce, run: noResult(run), done: s.enforceDone}
}

func (s *Supervisor) enforceDone(_ context.Context, o outcome[struct{}]) (error, bool) {
	if o.err != nil {
		s.log.Error("could not stop a unit on standby", "err", o.err)
	}
	return nil, false
}

func (s *Supervisor) demoteWork(token int64, lease clientv3.LeaseID) work[struct{}] {
	return work[struct{}]{kind: jobDemote, run: noResult(s.demoteJob(token, lease)), done: s.demoteDone}
}

// demoteDone: units confirmed stopped and the key released (Demoting ->
// Standby, or on to leave on shutdown), or a fence when they could not be
// confirmed stopped.
func (s *Supervisor) demoteDone(bg context.Context, o outcome[struct{}]) (error, bool) {
	if o.err != nil {
		return s.fenceNoted(bg, "demote_failed", "demotion could not confirm units stopped: "+o.err.Error()), true
	}
	s.stopRenewer(electionLease, "demotion")
	s.term.deadline.Forget(electionLease)
	s.term.elecLease, s.term.token = 0, 0
	s.loop.leader = group.LeaderInfo{}
	if s.loop.shutting {
		// Leave too, so that a restarted supervisor (an upgrade) finds no
		// record of ours to wait for.
		launch(s, bg, s.leaveWork(s.loop.memberLease))
		return nil, false
	}
	s.transition(group.Standby, "released", s.loop.reason)
	return nil, false
}

func (s *Supervisor) leaveWork(lease clientv3.LeaseID) work[struct{}] {
	return work[struct{}]{kind: jobLeave, run: noResult(s.leaveJob(lease)), done: s.leaveDone}
}

// leaveDone: the member left the group (-> Stopped); Run returns.
func (s *Supervisor) leaveDone(context.Context, outcome[struct{}]) (error, bool) {
	s.transition(group.Stopped, "shutdown", "units stopped, lease released, left the group")
	return nil, true
}

// crashCooldown is how long a member that found its previous incarnation's
// records alive stays out of the election: about until those records and
// that incarnation's election key have lapsed.
func crashCooldown(renewInterval, pollInterval time.Duration) time.Duration {
	return 2*renewInterval + pollInterval
}
