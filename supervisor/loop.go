package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
)

// Lease names in the fence clock.
const (
	electionLease = "election"
	memberLease   = "member"
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

// mayCampaign reports whether this standby may try for the election key.
func (s *Supervisor) mayCampaign(now time.Time) bool {
	if now.Before(s.cooldown) || s.ctlErr != nil || s.ctl.Freeze != nil || s.ctl.Banned(s.cfg.Node) {
		return false
	}
	if h := s.ctl.Handoff; h != nil && (h.From == s.cfg.Node || (h.To != "" && h.To != s.cfg.Node)) {
		return false // a switchover to someone else is under way: hold off
	}
	// Never take the lead while a local unit may still run, and never
	// before the units were observed at all.
	return !s.unitsSeen.IsZero() && len(runningUnits(s.lastUnits)) == 0
}

// startPreGrace is how long standby enforcement leaves a unit alone while
// it is still in its ExecStartPre= phase: that is where the guard runs, and
// it refuses the start itself with a message naming the leader; stopping
// the unit then would kill the guard before it could say so. The main
// process cannot run before ExecStartPre= succeeds, so waiting is safe; a
// unit that lingers there longer (the guard removed, another slow
// ExecStartPre=) is stopped like any other.
const startPreGrace = 5 * time.Second

// enforceable lists the managed units a standby must stop now.
func (s *Supervisor) enforceable(now time.Time) []string {
	var out []string
	for _, u := range s.lastUnits {
		if !u.Running() {
			delete(s.startPre, u.Name)
			continue
		}
		if u.SubState == "start-pre" || u.SubState == "condition" {
			first, ok := s.startPre[u.Name]
			if !ok {
				s.startPre[u.Name] = now
				continue
			}
			if now.Sub(first) < startPreGrace {
				continue
			}
		}
		out = append(out, u.Name)
	}
	return out
}

func runningUnits(states []fencing.UnitState) []string {
	var out []string
	for _, u := range states {
		if u.Running() {
			out = append(out, u.Name)
		}
	}
	return out
}

// onRenewal folds one renewal answer into the fence clock.
func (s *Supervisor) onRenewal(r renewal) {
	switch {
	case r.name == electionLease && r.lease != s.elecLease, r.name == memberLease && r.lease != s.memberLease:
		return // answer for a lease we no longer track
	case r.err == nil:
		s.deadline.Renewed(r.name, r.sent, r.ttl)
		s.resetFenceTimer()
		return
	case errors.Is(r.err, rpctypes.ErrLeaseNotFound) && r.name == electionLease && s.state == Demoting:
		// The demotion releases the lease itself; an answer racing that
		// release is not a loss. Had someone else revoked it, the next
		// leader still waits at the barrier for our record to say the
		// units are down, and the fence clock keeps running regardless.
		return
	case errors.Is(r.err, rpctypes.ErrLeaseNotFound):
		if s.state.Holding() {
			s.fenceNow, s.fenceKind = fmt.Sprintf("%s lease %x no longer exists in etcd (revoked or expired)", r.name, r.lease), "lease_lost"
			return
		}
		if r.name == memberLease {
			s.log.Warn("member lease lost while standby; re-registering", "lease", fmt.Sprintf("%x", r.lease))
			s.stopRenewer(memberLease)
			s.deadline.Forget(memberLease)
			s.memberLease = 0
		}
	default:
		s.log.Warn("renewal failed", "lease", r.name, "err", r.err, "fence_in", s.deadline.Left(time.Now()).Round(time.Millisecond))
	}
}

// onLeader records the election key as read; a holder that finds its key
// gone or re-created fences at once.
func (s *Supervisor) onLeader(o leaderObs) {
	if o.err != nil {
		return
	}
	if s.token != 0 && o.info.Revision < s.token {
		return // read before we won: stale
	}
	s.leader = o.info
	if o.ctlErr != nil {
		// An operator's request we cannot read (a freeze, a ban) must not
		// be ignored: campaign no more until it is readable.
		s.log.Error("control records unreadable; not campaigning until they are", "err", o.ctlErr)
	}
	s.ctl, s.ctlErr = o.ctl, o.ctlErr
	if d := o.ctl.Drill; d != nil && d.Token == s.token && s.token != 0 && s.state == Active && o.ctl.Freeze == nil {
		s.fenceNow, s.fenceKind = fmt.Sprintf("failover drill %s: fencing as if renewal had failed", d.ID), "drill"
	}
	if (s.state == Promoting || s.state == Active) && o.info.Token != s.token {
		if o.info.Present() {
			s.fenceNow, s.fenceKind = fmt.Sprintf("election key taken over by %s (token %d, ours %d)", o.info.Node, o.info.Token, s.token), "key_lost"
		} else {
			s.fenceNow, s.fenceKind = fmt.Sprintf("election key deleted (our token %d)", s.token), "key_lost"
		}
	}
}

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
	now := time.Now()
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
		s.gate.open()
		s.start(bg, "promote", s.promoteJob(s.token))
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
		// Judge the restart by what runs now, not by the job's error, so
		// one failure is never counted twice.
		if r.units.err == nil {
			s.assessUnits(bg, r.units)
		} else if r.err != nil && s.state == Active {
			s.failed(time.Now(), r.err.Error())
		}
	case "enforce":
		if r.err != nil {
			s.log.Error("could not stop a unit on standby", "err", r.err)
		}
	case "demote":
		if r.err != nil {
			return s.fence(bg, "demote_failed", "demotion could not confirm units stopped: "+r.err.Error()), true
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

// demote starts the graceful path: units down in reverse order, record
// says so, then the key and lease are released. cooldown > 0 keeps this
// member out of the election for that long.
func (s *Supervisor) demote(bg context.Context, kind, reason string, cooldown time.Duration) {
	if s.job != nil {
		s.job.cancel()
		// The cancelled job reports back through jobDone; demote runs as
		// soon as it has (step sees Promoting/Active with shutting, or the
		// promote result arrives while state is Demoting).
	}
	s.gate.closeWait(500 * time.Millisecond)
	if cooldown > 0 {
		s.cooldown = time.Now().Add(cooldown)
	}
	s.transition(Demoting, kind, reason)
	s.reason = "demoted: " + reason
	token, lease := s.token, s.elecLease
	s.startAfter(bg, "demote", func(ctx context.Context) (any, error) {
		if err := fencing.StopAll(ctx, s.units, s.cfg.Units.Managed, s.timeout); err != nil {
			return nil, err
		}
		s.unitsMayRun.Store(false)
		// Dated before the release, so that a drill can check that the old
		// units were down before anyone else could win.
		s.recordHistory(Event{At: time.Now(), Node: s.cfg.Node, From: Demoting, To: UnitsDown, Kind: "units_stopped", Reason: "units confirmed stopped; releasing the lease", Token: token})
		s.runHook(ctx, "on_demote", token)
		if err := s.writeRecord(ctx, true); err != nil {
			s.log.Warn("could not publish units stopped before release", "err", err)
		}
		s.release(ctx, token, lease)
		return nil, nil
	})
}

// fence stops every unit at once with SIGKILL escalation and returns the
// FenceError Run must return. It never starts anything again.
func (s *Supervisor) fence(bg context.Context, kind, reason string) error {
	start := time.Now()
	s.fenceNow, s.fenceKind = "", ""
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

// transition changes state and tells everyone who listens.
func (s *Supervisor) transition(to State, kind, reason string) {
	from := s.state
	if from == to && reason == s.reason {
		return
	}
	s.prevState = from
	s.state, s.reason, s.since = to, reason, time.Now()
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

// notify queues an sd_notify message for the notifier goroutine. It never
// blocks: while systemd does not read its notify socket (daemon-reexec under
// load) a datagram write blocks once the socket's queue is full, and the
// loop must keep its fence clock running meanwhile. Watchdog pings are the
// ones dropped when the queue backs up; a reexec that long is covered by
// systemd re-arming the watchdog when it comes back.
func (s *Supervisor) notify(msg string) {
	if s.opts.Notify == nil {
		return
	}
	if msg == "WATCHDOG=1" && len(s.notes) > cap(s.notes)/2 {
		return
	}
	select {
	case s.notes <- msg:
	default:
		s.log.Warn("sd_notify queue full; message dropped", "msg", msg)
	}
}

// notifier delivers queued sd_notify messages in order.
func (s *Supervisor) notifier(bg context.Context) {
	for {
		select {
		case <-bg.Done():
			return
		case msg := <-s.notes:
			s.opts.Notify(msg)
		}
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

func (s *Supervisor) runHook(ctx context.Context, name string, token int64) {
	if s.opts.Hook == nil {
		return
	}
	if err := s.opts.Hook(ctx, name, s.hookEnv(token)); err != nil {
		s.log.Warn("hook failed", "hook", name, "err", err)
	}
}

func (s *Supervisor) hookEnv(token int64) map[string]string {
	return map[string]string{
		"KHA_NODE":          s.cfg.Node,
		"KHA_CLUSTER":       s.cfg.Cluster,
		"KHA_ROLE":          string(s.state),
		"KHA_FENCING_TOKEN": fmt.Sprint(token),
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

// clearHandoff removes a fulfilled switchover request.
func (s *Supervisor) clearHandoff(bg context.Context, id string) {
	ctx, cancel := s.reqCtx(bg)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.keys.Handoff())
	if err != nil || len(resp.Kvs) != 1 {
		return
	}
	var h Handoff
	if json.Unmarshal(resp.Kvs[0].Value, &h) != nil || h.ID != id {
		return
	}
	_, _ = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.keys.Handoff()), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(s.keys.Handoff())).Commit()
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
