package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

func freezeScenario(ctx context.Context, r *Run) error {
	if out, code := r.kha(ctx, r.Leader, "freeze", "--reason", "lab scenario 17"); code != 0 {
		return fmt.Errorf("freeze: exit %d: %s", code, out)
	}
	r.Undo(func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return group.ClearFreeze(cctx, r.Cli, r.Keys)
	})
	r.Mark(time.Now(), r.Leader, "frozen")
	if out, _ := r.kha(ctx, r.Standby, "status"); !strings.Contains(out, "FROZEN") {
		r.Failf("status on %s does not show FROZEN: %q", r.Standby, out)
	}
	// No handoff and no drill while frozen.
	if out, code := r.kha(ctx, r.Leader, "handoff", "--wait", "--timeout", "5s"); code == 0 || !strings.Contains(out, "frozen") {
		r.Failf("handoff while frozen: exit %d, want a refusal naming the freeze: %q", code, out)
	}
	if out, code := r.kha(ctx, r.Leader, "drill", "failover"); code == 0 || !strings.Contains(out, "frozen") {
		r.Failf("drill failover while frozen: exit %d, want a refusal naming the freeze: %q", code, out)
	}
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd (frozen)", func() error {
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	// Fencing stays armed: the leader's units stop on its own timer.
	err = WaitFor(ctx, r.failoverTimeout(), "frozen leader fences", func() (bool, string) {
		t := r.refreshNow()
		return !r.AnyRunning(r.Leader, t), "units still beating on " + r.Leader
	})
	if err != nil {
		return err
	}
	oldLast := latest(r.lastBeats(r.Leader, fault))
	if !oldLast.IsZero() {
		r.Metric(report.MStopped, oldLast.Sub(fault))
		r.Mark(oldLast, r.Leader, "last heartbeat of "+r.Leader+"'s units")
	}
	// Frozen past the old lease's expiry (at most one TTL after the fault):
	// nobody may promote.
	if err := Sleep(ctx, time.Until(fault.Add(r.Profile.TTL+3*time.Second))); err != nil {
		return err
	}
	held := time.Now()
	r.setMS("held_frozen", ms(held.Sub(fault)))
	_ = r.W.Refresh()
	for _, ch := range r.Obs.LeaderChanges(fault, held) {
		if *ch.Leader != "" {
			r.Failf("%s won the election key while frozen", *ch.Leader)
		}
	}
	for _, u := range Units() {
		if ins := r.W.InstancesBetween(r.Standby, u, fault, held); len(ins) > 0 {
			r.Failf("%s ran on the standby %s while frozen", u, r.Standby)
		}
	}
	if rec, ok := r.Obs.Now().Records[r.Standby]; !ok || rec.State != group.Standby {
		r.Failf("standby %s while frozen: %s", r.Standby, describe(rec, ok))
	}
	r.Notef("frozen and cut: %s's units stopped %.0f ms after the cut; nobody promoted for %.1f s", r.Leader, ms(oldLast.Sub(fault)), held.Sub(fault).Seconds())
	unfreeze, err := r.faultless("unfreeze on "+r.Standby, func() error {
		if out, code := r.kha(ctx, r.Standby, "unfreeze"); code != 0 {
			return fmt.Errorf("unfreeze: exit %d: %s", code, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	if first, ok := r.allStartedAfter(r.Standby, unfreeze); ok {
		r.Metric("unfreeze_to_units", first.Sub(unfreeze))
	}
	r.expectStoppedBeforeWin()
	return r.Heal(ctx)
}

// faultless runs an operator step that is not the fault (it keeps FaultAt)
// and marks it on the timeline; it returns when the step began.
func (r *Run) faultless(what string, do func() error) (time.Time, error) {
	t := time.Now()
	r.Mark(t, "", what)
	return t, do()
}

// allStartedAfter is when the last of node's units first beat after t.
func (r *Run) allStartedAfter(node string, t time.Time) (time.Time, bool) {
	_ = r.W.Refresh()
	var all time.Time
	for _, u := range Units() {
		first, ok := r.W.FirstStart(node, u, t)
		if !ok {
			return time.Time{}, false
		}
		all = later(all, first)
	}
	return all, true
}
