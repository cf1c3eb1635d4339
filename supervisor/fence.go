package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
)

// secondLookMin is the least time the fence's second look (did a start land
// after our stop?) gets when the first pass used up the stop budget.
const secondLookMin = 200 * time.Millisecond

// fence stops every unit at once with SIGKILL escalation and returns the
// FenceError Run must return. It never starts anything again.
//
// The units must be down within S_max of the fence instant whatever the
// service manager does (issue 13): the stop, the SIGKILL and the direct kill
// from the cgroups (fencing.DirectKiller) all run against one hard deadline,
// the watchdog is fed only until it, and a fence that cannot confirm the
// units down exits at once so that systemd's BindsTo= takes over. Record,
// history, lease revocation and on_fence come only after the units are
// confirmed down, each bounded.
func (s *Supervisor) fence(bg context.Context, kind, reason string) error {
	start := deadlineNow()
	hard := start.Add(s.timeout.StopMax())
	s.loop.fenceNow, s.loop.fenceKind = "", ""
	s.cutAPI()
	if s.jobs.cur != nil {
		s.jobs.cur.cancel()
	}
	// Wait (briefly) for an in-flight start call to return so that our stop
	// jobs are queued after it and replace it.
	s.term.gate.closeWait(s.blockFor(200 * time.Millisecond))
	s.transition(group.Fencing, kind, reason)
	s.updateSnapshot()
	s.log.Error("FENCING", "reason", reason, "token", s.term.token, "lease_left", s.term.deadline.LeaseLeft(start).Round(time.Millisecond))

	err := s.fenceUnits(bg, hard)
	took := deadlineNow().Sub(start)
	if err != nil {
		// Not even the cgroups confirm the units gone: exit now, unpinged,
		// and let BindsTo= stop them. Nothing may delay that, not even the
		// history flush on the way out.
		s.log.Error("fenced: units NOT confirmed stopped; exiting so that systemd stops them (BindsTo=)", "reason", reason, "took", took.Round(time.Millisecond), "err", err)
		s.history.drop()
		return &FenceError{Reason: reason, Incomplete: err}
	}
	s.term.unitsMayRun.Store(false)
	// The units are down: a watchdog kill can no longer do harm, so ping at
	// once (under a backstop none has gone out since the term's PingBy, and
	// the kill is due lease.slack after the fence instant) and on through
	// the bounded epilogue rather than lose its work.
	pctx, stopPing := context.WithCancel(bg)
	go s.pingUntil(pctx, time.Time{})
	defer stopPing()
	s.log.Error("fenced: units stopped", "reason", reason, "took", took.Round(time.Millisecond), "stop_budget", s.timeout.StopMax())
	for _, name := range []string{electionLease, memberLease} {
		s.endRenewStreak(name, "fence")
	}
	s.resetConnections()
	s.fenceEpilogue(bg, kind, took)
	return &FenceError{Reason: reason}
}

// fenceUnits stops, kills and confirms, all before hard (the second look
// gets at least secondLookMin). The watchdog is fed until hard and no later
// (under a backstop, not past the term's PingBy either): a fence stuck on a
// hung manager must let systemd kill this process.
func (s *Supervisor) fenceUnits(bg context.Context, hard time.Time) error {
	pctx, stopPing := context.WithCancel(bg)
	defer stopPing()
	if until, ok := s.fencePingsUntil(hard); ok {
		go s.pingUntil(pctx, until)
	}

	ctx, cancel := context.WithDeadline(bg, hard)
	err := fencing.Fence(ctx, s.units, s.cfg.Units.Managed, s.timeout)
	cancel()
	if err != nil {
		return err
	}
	// A second look: something may have started behind our back or the
	// cancelled start may have landed after the stop.
	vctx, vcancel := context.WithDeadline(bg, later(hard, deadlineNow().Add(secondLookMin)))
	defer vcancel()
	return fencing.ConfirmDown(vctx, s.units, s.cfg.Units.Managed, s.timeout)
}

// fenceEpilogue tells the others, gives back the election lease and runs
// the hook; the units are down. A failover drill keeps the lease, so that
// it rehearses the full wait of a node that went silent.
func (s *Supervisor) fenceEpilogue(bg context.Context, kind string, took time.Duration) {
	publish := func() error {
		pctx, pcancel := s.reqCtx(bg)
		defer pcancel()
		return s.writeRecord(pctx, false)
	}
	perr := publish()
	if perr != nil {
		s.log.Warn("fenced: could not publish units stopped", "err", perr)
	}
	if kind != "drill" && s.term.elecLease != 0 {
		rctx, rcancel := s.reqCtx(bg)
		if _, err := s.cli.Revoke(rctx, s.term.elecLease); err != nil {
			s.log.Warn("fenced: could not revoke the election lease; the others wait for it to expire", "lease", fmt.Sprintf("%x", s.term.elecLease), "err", err)
		} else {
			s.log.Info("fenced: election lease revoked after the units stopped", "lease", fmt.Sprintf("%x", s.term.elecLease))
			// etcd answers again (a partition healed while we fenced):
			// without the record the next leader's barrier waits for
			// our next incarnation to say the units are stopped.
			if perr != nil && publish() == nil {
				s.log.Info("fenced: units stopped published after all")
			}
		}
		rcancel()
	}
	hctx, hcancel := s.reqCtx(bg)
	_ = group.AppendHistory(hctx, s.cli, s.keys, group.Event{At: s.now(), Node: s.cfg.Node, From: group.Fencing, To: group.Fenced, Kind: kind, Reason: fmt.Sprintf("units stopped in %s", took.Round(time.Millisecond)), Token: s.term.token}, s.cfg.History.Retain)
	hcancel()
	s.withdrawToken()
	s.runHook(bg, "on_fence", s.term.token)
}

// resetConnections destroys this host's connections to etcd now that the
// units are down (Options.ResetConnections): a write the node's apiserver
// had sent for them and a partition holds in the kernel's queue is
// discarded rather than retransmitted after the heal, when it could land
// after the next leader's first write (issue 22). It runs before the
// record, the lease revocation and on_fence, so before the next leader can
// be let in early; its failure is loud but stops nothing.
func (s *Supervisor) resetConnections() {
	if s.opts.ResetConnections == nil {
		return
	}
	start := deadlineNow()
	n, err := s.opts.ResetConnections()
	took := deadlineNow().Sub(start).Round(time.Microsecond)
	if err != nil {
		s.log.Error("fenced: connections to etcd not all reset; a write already queued for etcd may still reach it when a partition heals",
			"destroyed", n, "took", took, "err", err)
		return
	}
	s.log.Info("fenced: connections to etcd reset", "destroyed", n, "took", took)
}

// fencePingsUntil is how long the fence may feed the watchdog before its
// units are confirmed down: until hard, and under a backstop
// (fencing.Window) never past the term's PingBy. A fence that began after
// it (a deadline fence always does) sends no ping until the units are down:
// frozen or late, it is then killed by systemd in time (BindsTo= stops the
// units), and on time it is done before that.
// ok is false when it may not ping at all (no lease tracked under a
// backstop: nothing proves the window).
func (s *Supervisor) fencePingsUntil(hard time.Time) (until time.Time, ok bool) {
	if !s.window.Backstopped() {
		return hard, true
	}
	by, ok := s.term.deadline.PingBy()
	if !ok {
		return time.Time{}, false
	}
	return earlier(by, hard), true
}

// pingUntil feeds the watchdog every tick until ctx ends or, when until is
// set, until that instant (each ping carries it, so that one queued in time
// but sent after it is dropped).
func (s *Supervisor) pingUntil(ctx context.Context, until time.Time) {
	t := time.NewTicker(tickFor(s.window.Watchdog))
	defer t.Stop()
	for now := time.Now(); ; {
		if !until.IsZero() && !now.Before(until) {
			return
		}
		s.notes.queue(note{msg: "WATCHDOG=1", by: until})
		select {
		case <-ctx.Done():
			return
		case now = <-t.C:
		}
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
