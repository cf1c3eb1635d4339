package scenario

import (
	"context"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
)

// noGuardDropin overrides the guard the way a later drop-in does by
// mistake: it sorts after 50-kha-supervisor.conf and empties ExecStartPre=.
const noGuardDropin = master.UnitDir + "/" + scheduler + ".service.d/90-lab-no-guard.conf"

// Scenario 30 (issue 13.5): the guard removed from a managed unit through a
// later drop-in on the standby. A node whose units lack the guard (or
// BindsTo=, or a stop timeout within the budget) must refuse to campaign:
// the leader keeps leading; when the leader stops, nobody takes over until
// it is back (a misconfigured node never runs the units).
func guardOverridden(ctx context.Context, r *Run) error {
	s, l := r.Standby, r.Leader
	n := r.Nodes[s]
	r.Undo(func(ctx context.Context) error {
		if err := n.RemoveFile(noGuardDropin); err != nil {
			return err
		}
		if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
			return err
		}
		_, err := r.Nodes[l].Systemctl(ctx, "start", lab.SupervisorUnit)
		return err
	})
	if err := n.WriteFile(noGuardDropin, []byte("# Written by kha-lab (scenario 30): resets the guard.\n[Service]\nExecStartPre=\n"), 0o644); err != nil {
		return err
	}
	if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	out, err := n.Exec(ctx, "systemctl", "show", "-p", "ExecStartPre", "--value", scheduler+".service")
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(out)) != "" {
		r.Failf("the override did not take: ExecStartPre=%s", strings.TrimSpace(string(out)))
	}
	r.Mark(time.Now(), s, "guard overridden by "+noGuardDropin)
	// Let the standby notice (it re-reads the units on systemd reloads).
	if err := Sleep(ctx, 2*r.Profile.Poll+time.Second); err != nil {
		return err
	}
	fault, err := r.Fault("systemctl stop kha-supervisor on the leader "+l, func() error {
		_, err := r.Nodes[l].Systemctl(ctx, "stop", lab.SupervisorUnit)
		return err
	})
	if err != nil {
		return err
	}
	if err := Sleep(ctx, 2*r.Profile.TTL); err != nil {
		return err
	}
	_ = r.W.Refresh()
	won, _, standbyWon := r.Obs.FirstWin(s, fault)
	if standbyWon {
		r.Failf("%s, its guard overridden, won the election %s after the leader stopped", s, won.Sub(fault).Round(time.Millisecond))
	}
	for _, u := range Units() {
		if ins := r.W.InstancesBetween(s, u, fault, time.Now()); len(ins) > 0 {
			r.Failf("%s ran on %s with its guard overridden", u, s)
		}
	}
	rec, ok := r.Obs.Now().Records[s]
	r.Notef("%s's record: %s reason %q", s, describe(rec, ok), rec.Reason)
	r.Notef("%s's supervisor: %s", s, linesWith(r.JournalSince(ctx, s, lab.SupervisorUnit, fault.Add(-10*time.Second)), "ExecStartPre", 2))
	if standbyWon {
		return nil // the leader comes back as standby; nothing more to judge
	}
	// The leader comes back and leads again.
	restart := time.Now()
	if _, err := r.Nodes[l].Systemctl(ctx, "start", lab.SupervisorUnit); err != nil {
		return err
	}
	r.Mark(restart, l, "kha-supervisor started again on "+l)
	if at, err := r.waitUnits(ctx, l, restart); err == nil {
		r.Metric("leader_back", at.Sub(restart))
	} else {
		r.Failf("%s did not lead again: %v", l, err)
	}
	return nil
}
