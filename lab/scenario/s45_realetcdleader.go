package scenario

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 45 (real plane): kill -9 of the etcd raft leader. The other two
// members elect a new leader within about an election timeout (stock: 1 s);
// neither the supervisors' lease nor the components' Leases should move,
// and the apiservers' clients move to a live member.
func init() {
	registerReal(plane.Spec{ID: 45, Name: "real: etcd raft leader killed",
		Fault: "kill -9 of the etcd member that is raft leader (restarted after the trial)",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			e := t.R.P.Lab.Etcd
			victim, err := t.R.P.EtcdLeader(ctx)
			if err != nil {
				return nil, err
			}
			t.Notef("killed etcd member %s (raft leader)", victim)
			heal := func(ctx context.Context) error {
				if err := e.Start(victim); err != nil {
					return err
				}
				return e.WaitHealthy(ctx, e.Members...)
			}
			return heal, e.Kill(ctx, victim)
		}})
}
