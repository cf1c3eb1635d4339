package scenario

import (
	"context"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/master"
)

func unitIgnoresTerm(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	w := witnessOf(scheduler)
	if err := n.SetFault(w, master.Fault{IgnoreTerm: true}); err != nil {
		return err
	}
	r.Undo(func(context.Context) error { return n.SetFault(w, master.Fault{}) })
	// The leader may restart its own unit (the guard lets it): the new
	// instance ignores SIGTERM.
	before := time.Now()
	if _, err := n.Systemctl(ctx, "restart", w.Service()); err != nil {
		return err
	}
	err := WaitFor(ctx, 30*time.Second, "restarted unit beating", func() (bool, string) {
		t := r.refreshNow()
		_, ok := r.W.FirstStart(r.Leader, scheduler, before)
		return ok && r.Running(r.Leader, t), "not yet"
	})
	if err != nil {
		return err
	}
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd ("+scheduler+" ignores SIGTERM)", func() error {
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	// Evidence of the escalation: the scheduler outlived the other unit
	// (it ignored SIGTERM) and systemd saw it die of SIGKILL.
	_ = r.W.Refresh()
	sLast, _ := r.W.LastBeat(r.Leader, scheduler, time.Now())
	var others time.Time
	for _, u := range Units() {
		if u != scheduler {
			if t, ok := r.W.LastBeat(r.Leader, u, time.Now()); ok && t.After(others) {
				others = t
			}
		}
	}
	if !others.IsZero() {
		r.Metric("term_ignored_for", sLast.Sub(others))
	}
	out, err := n.Exec(ctx, "systemctl", "show", "-p", "ExecMainCode", "-p", "ExecMainStatus", "-p", "Result", w.Service())
	if err != nil {
		return err
	}
	props := string(out)
	if !strings.Contains(props, "ExecMainStatus=9") {
		r.Failf("%s on %s did not end by SIGKILL: %s", w.Service(), r.Leader, strings.Join(strings.Fields(props), " "))
	} else {
		r.Notef("%s on %s ended by SIGKILL (%s)", w.Service(), r.Leader, strings.Join(strings.Fields(props), " "))
	}
	return r.Heal(ctx)
}
