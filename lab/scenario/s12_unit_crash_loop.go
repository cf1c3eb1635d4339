package scenario

import (
	"context"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/master"
)

func crashLoop(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	w := witnessOf(scheduler)
	if err := n.SetFault(w, master.Fault{CrashAfter: 300 * time.Millisecond}); err != nil {
		return err
	}
	r.Undo(func(context.Context) error { return n.SetFault(w, master.Fault{}) })
	fault, err := r.Fault("restart "+scheduler+" on "+r.Leader+" into a crash loop (exit 1 every 300 ms)", func() error {
		_, err := n.Systemctl(ctx, "restart", w.Service())
		return err
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	if rec, ok := r.Obs.Now().Records[r.Leader]; ok {
		r.Notef("%s after demotion: state %s, reason %q, cooldown until %s", r.Leader, rec.State, rec.Reason, rec.Cooldown.Format("15:04:05.000"))
	}
	return nil
}
