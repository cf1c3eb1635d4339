package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/lab"
)

// takeoverDelay holds the winner of scenario 27 between its win and its
// units' start, long enough for an operator's start to land in between.
const takeoverDelay = 5 * time.Second

// Scenario 27 (issue 13.3): a node that has won the election key but has
// not started its units yet (here held by lease.takeover_delay; the
// promotion barrier is the same window) must refuse an operator's
// `systemctl start` of a managed unit: the old leader's units may still run.
func startAtBarrier(ctx context.Context, r *Run) error {
	s, l := r.Standby, r.Leader
	n := r.Nodes[s]
	withDelay := r.Lab.SupervisorConfig(s)
	withDelay.Lease.TakeoverDelay = takeoverDelay
	if err := r.setConfig(ctx, s, lab.ConfigText(withDelay)); err != nil {
		return err
	}
	r.Undo(func(ctx context.Context) error { return r.setConfig(ctx, s, r.Lab.SupervisorConfigFor(s)) })
	r.Undo(func(ctx context.Context) error {
		_, err := r.Nodes[l].Systemctl(ctx, "start", lab.SupervisorUnit)
		return err
	})
	if err := r.resteady(ctx); err != nil {
		return err
	}
	if r.Standby != s {
		return fmt.Errorf("%s leads after its restart; want it standby", s)
	}
	fault, err := r.Fault("systemctl stop kha-supervisor on "+l+" (the standby "+s+" waits out takeover_delay "+takeoverDelay.String()+")", func() error {
		_, err := r.Nodes[l].Systemctl(ctx, "stop", lab.SupervisorUnit)
		return err
	})
	if err != nil {
		return err
	}
	err = WaitFor(ctx, r.failoverTimeout(), s+" wins", func() (bool, string) {
		snap := r.Obs.Now()
		return snap.Leader == s && snap.Token != r.LeaderToken, "leader " + snap.Leader
	})
	if err != nil {
		return err
	}
	won := time.Now()
	// The window to probe: the winner says "promoting" (it holds the key
	// and waits) and has not started anything; give its status a poll to
	// catch up, as an operator's command would come seconds later anyway.
	err = WaitFor(ctx, takeoverDelay/2, s+" promoting", func() (bool, string) {
		rec, ok := r.Obs.Now().Records[s]
		return ok && rec.State == group.Promoting && !rec.UnitsRunning, describe(rec, ok)
	})
	if err != nil {
		return err
	}
	if err := Sleep(ctx, r.Profile.Poll); err != nil {
		return err
	}
	unit := scheduler + ".service"
	r.Undo(func(ctx context.Context) error {
		_, _ = n.Systemctl(ctx, "reset-failed", unit)
		return nil
	})
	r.probeStart(ctx, s, unit, won)
	if _, err := r.Failover(ctx, fault, s); err != nil {
		return err
	}
	if first, ok := r.allStartedAfter(s, won); ok {
		r.Metric("units_after_win", first.Sub(won))
		if first.Sub(won) > takeoverDelay+5*time.Second {
			r.Notef("%s's promotion: %s", s, linesWith(r.JournalSince(ctx, s, lab.SupervisorUnit, won), "transition", 4))
		}
	}
	return nil
}

// setConfig writes node's configuration and restarts its supervisor (a
// handoff if it leads), then waits for the steady state.
func (r *Run) setConfig(ctx context.Context, node string, cfg []byte) error {
	n := r.Nodes[node]
	if err := n.WriteFile(lab.SupervisorConfig, cfg, 0o600); err != nil {
		return err
	}
	if out, err := n.Exec(ctx, supervisorBinary, "check-config", "-c", lab.SupervisorConfig); err != nil {
		return fmt.Errorf("check-config on %s: %w: %s", node, err, out)
	}
	if _, err := n.Systemctl(ctx, "restart", lab.SupervisorUnit); err != nil {
		return err
	}
	_, _, err := r.Steady(ctx, r.steadyTimeout())
	return err
}

// probeStart is the operator's `systemctl start unit` on node while it waits
// to start its units (won is when it won). Only the guard's own answer is a
// verdict: a start that systemd fails before the guard runs (on this host
// status=219/CGROUP, a cgroup refused right after another went) is retried
// while the window lasts, and a window without any verdict fails as such.
func (r *Run) probeStart(ctx context.Context, node, unit string, won time.Time) {
	n := r.Nodes[node]
	for attempt := 1; time.Since(won) < takeoverDelay-time.Second; attempt++ {
		at := time.Now()
		out, code := n.Run(ctx, "systemctl", "start", unit)
		r.Mark(time.Now(), node, fmt.Sprintf("operator's systemctl start %s: exit %d", unit, code))
		if code == 0 {
			r.Failf("systemctl start %s on %s succeeded %s after it won, while it waited out takeover_delay (before its promotion started the units)",
				unit, node, time.Since(won).Round(time.Millisecond))
			return
		}
		// A refused start leaves the unit failed; the promotion must not
		// trip over the operator's attempt.
		_, _ = n.Systemctl(ctx, "reset-failed", unit)
		journal := r.JournalSince(ctx, node, unit, at)
		if strings.Contains(journal, "refusing to start") {
			r.Notef("refused by the guard %s after the win (attempt %d): %s", at.Sub(won).Round(time.Millisecond), attempt,
				linesWith(journal, "refusing to start", 1))
			return
		}
		r.Notef("attempt %d: systemctl start failed (exit %d) before the guard answered: %s | %s", attempt, code,
			firstLine(strings.TrimSpace(out)), linesWith(journal, "status=", 1))
		_ = Sleep(ctx, 300*time.Millisecond)
	}
	r.Failf("not judged: no start attempt reached the guard within the takeover delay")
}
