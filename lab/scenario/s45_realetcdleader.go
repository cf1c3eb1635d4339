package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 45 (real plane): kill -9 of the etcd raft leader. The other two
// members elect a new leader within about an election timeout (stock: 1 s);
// neither the supervisors' lease nor the components' Leases should move,
// and the apiservers' clients move to a live member.
func init() {
	registerReal(plane.Spec{ID: 45, Layout: lab.LayoutSeparate, Name: "real: etcd raft leader killed",
		Fault: "kill -9 of the etcd member that is raft leader (restarted after the trial)",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			e := t.R.P.Lab.Etcd
			victim, err := t.R.P.EtcdLeader(ctx)
			if err != nil {
				return nil, err
			}
			t.Notef("killed etcd member %s (raft leader)", victim)
			heal := func(ctx context.Context) error {
				// Start is a no-op while the killed process still counts
				// as running (not yet reaped): wait for it to be gone, and
				// bound the wait for a healthy cluster, so that a member
				// that never comes back fails the trial instead of
				// hanging it (the soak of 3 December, 11:09, waited
				// without end for e1).
				ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				for e.Running(victim) {
					if err := Sleep(ctx, 100*time.Millisecond); err != nil {
						return fmt.Errorf("killed etcd member %s still running: %w", victim, err)
					}
				}
				if err := e.Start(victim); err != nil {
					return err
				}
				return e.WaitHealthy(ctx, e.Members...)
			}
			return heal, e.Kill(ctx, victim)
		}})
}
