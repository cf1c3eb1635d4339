package scenario

import (
	"context"
	"time"
)

// Scenario 34 (issue 11.6): the leader cut off from etcd while the etcd
// raft leader is killed at the same instant. etcd's new leader extends
// every lease by its full TTL (lessor Promote), so the takeover may come up
// to a TTL plus an election later than after a plain cut; it must stay
// within two TTLs. A measurement more than a bug: the figure is the point.
func cutAndEtcdLeaderChange(ctx context.Context, r *Run) error {
	victim, err := r.etcdLeader(ctx)
	if err != nil {
		return err
	}
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd and kill -9 of the etcd raft leader "+victim, func() error {
		if err := r.Lab.Etcd.Kill(ctx, victim); err != nil {
			return err
		}
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	r.Notef("killed etcd member %s, the raft leader, with the cut", victim)
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	r.failoverWithin(2*r.Profile.TTL, "etcd's lease extension on a leader change")
	if err := r.Lab.Etcd.Start(victim); err != nil {
		return err
	}
	r.Mark(time.Now(), "", "etcd member "+victim+" restarted")
	return r.Heal(ctx)
}
