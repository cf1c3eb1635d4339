package scenario

import (
	"context"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Scenario 36 (issue 11.8): a cooldown that leaves nobody. The leader's
// scheduler crash-loops, it demotes and sits out its cooldown; the other
// master takes over and then stops. With no other member eligible the
// cooled-down node must campaign (a flaky component beats none) instead of
// leaving the units down until its cooldown ends.
func cooldownAlone(ctx context.Context, r *Run) error {
	a, b := r.Leader, r.Standby
	n := r.Nodes[a]
	w := witnessOf(scheduler)
	if err := n.SetFault(w, master.Fault{CrashAfter: 300 * time.Millisecond}); err != nil {
		return err
	}
	r.Undo(func(context.Context) error { return n.SetFault(w, master.Fault{}) })
	r.Undo(func(ctx context.Context) error {
		_, err := r.Nodes[b].Systemctl(ctx, "start", lab.SupervisorUnit)
		return err
	})
	crash, err := r.faultless("restart "+scheduler+" on "+a+" into a crash loop", func() error {
		_, err := n.Systemctl(ctx, "restart", w.Service())
		return err
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, crash, b); err != nil {
		return err
	}
	// The component is healthy again; only the cooldown keeps a out.
	if err := n.SetFault(w, master.Fault{}); err != nil {
		return err
	}
	rec, ok := r.Obs.Now().Records[a]
	if !ok || !rec.Cooldown.After(time.Now()) {
		return r.notJudged("%s is not in cooldown after its demotion (%s)", a, describe(rec, ok))
	}
	cooldownEnd := rec.Cooldown
	r.Mark(cooldownEnd, a, "cooldown of "+a+" ends")
	r.keepAsSetup()
	r.Leader, r.Standby, r.LeaderToken = b, a, r.Obs.Now().Token
	fault, err := r.Fault("systemctl stop kha-supervisor on "+b+" ("+a+" in cooldown)", func() error {
		_, err := r.Nodes[b].Systemctl(ctx, "stop", lab.SupervisorUnit)
		return err
	})
	if err != nil {
		return err
	}
	left := cooldownEnd.Sub(fault)
	r.Metric("cooldown_left", left)
	if left < 3*time.Second {
		return r.notJudged("only %s of %s's cooldown left at the stop: too little to tell an override from its end", left.Round(time.Millisecond), a)
	}
	if _, err := r.Failover(ctx, fault, a); err != nil {
		return err
	}
	if f := r.Res.Metrics[report.MFailover]; fault.Add(time.Duration(f * float64(time.Millisecond))).After(cooldownEnd.Add(-time.Second)) {
		r.Failf("%s took over only as its cooldown ended (%.0f ms after the stop, %s of cooldown left): nobody ran the units meanwhile", a, f, left.Round(time.Millisecond))
	}
	return nil
}

// notJudged fails a scenario that could not set up what it judges.
func (r *Run) notJudged(format string, a ...any) error {
	r.Failf("not judged: "+format, a...)
	return nil
}

// keepAsSetup drops the standard metrics measured so far (a scenario's first
// phase), keeping them under "setup_" names.
func (r *Run) keepAsSetup() {
	for _, k := range []string{report.MStopped, report.MWon, report.MFailover, report.MMargin, report.MGap} {
		if v, ok := r.Res.Metrics[k]; ok {
			r.Res.Metrics["setup_"+k] = v
			delete(r.Res.Metrics, k)
		}
	}
}
