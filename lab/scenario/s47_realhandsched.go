package scenario

import (
	"context"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 47 (real plane): an operator starts a second kube-scheduler by
// hand on the standby, with the unit's own command line (the real
// kubeconfig), outside any unit. Under kha-supervisor that command line
// says --leader-elect=false: nothing in Kubernetes stops it from binding
// pods; the standby's supervisor finds a managed component's executable
// outside its unit and kills it (units.stray_policy "kill"). With leader
// election the copy carries --leader-elect=true and waits for the Lease.
// Judged at the resource: were two masters' bindings accepted at once?
func init() {
	registerReal(plane.Spec{ID: 47, Name: "real: second scheduler started by hand on the standby",
		Fault: "kube-scheduler started by hand (setsid, the unit's command line) on the standby",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			n := t.Nodes[t.Standby()]
			h, err := t.R.P.StartByHand(ctx, n, kube.Scheduler, t.Mode)
			if err != nil {
				return nil, err
			}
			start := time.Now()
			wctx, cancel := context.WithCancel(ctx)
			ended := h.Watch(wctx)
			heal := func(ctx context.Context) error {
				cancel()
				if at := <-ended; !at.IsZero() {
					t.Notef("the hand-started kube-scheduler (PID %d on %s) ended %s after its start", h.PID, n.Name, at.Sub(start).Round(10*time.Millisecond))
				} else {
					t.Notef("the hand-started kube-scheduler (PID %d on %s) still ran at the heal; the lab killed it", h.PID, n.Name)
				}
				return h.Kill(ctx)
			}
			return heal, nil
		}})
}
