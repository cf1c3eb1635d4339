package scenario

import (
	"context"
)

func leaderRackIsolated(ctx context.Context, r *Run) error {
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd and from "+r.Standby, func() error {
		return r.cutFromEtcd(ctx, r.Leader, r.Standby)
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	return r.Heal(ctx)
}
