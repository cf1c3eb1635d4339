package scenario

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// Scenario 23 (issue 13.1): the election key and the leader's member record
// vanish together (a cleanup by hand, both of the leader's leases revoked).
// A barrier that only waits for records that exist lets the standby start
// at once while the old scheduler still uses its SIGTERM budget: overlap.
func recordAndKeyDeleted(ctx context.Context, r *Run) error {
	if err := r.ignoreTerm(ctx, r.Leader); err != nil {
		return err
	}
	fault, err := r.Fault("delete the election key and members/"+r.Leader+" in one transaction", func() error {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := r.Cli.Txn(dctx).Then(
			clientv3.OpDelete(r.Keys.Leader()),
			clientv3.OpDelete(r.Keys.Member(r.Leader)),
		).Commit()
		return err
	})
	if err != nil {
		return err
	}
	newLeader, err := r.Failover(ctx, fault, lab.MasterNames...)
	if err != nil {
		// A stranded member holds the key without running anything:
		// record it, then repair the lab (recordsBack restarts it).
		r.Failf("%v", err)
		return r.recordsBack(ctx, fault, time.Second)
	}
	// The key vanished under a running leader: the other node may win
	// before the old units are down; only the barrier keeps them apart.
	r.barrier(fault, r.Leader, newLeader, "")
	return r.recordsBack(ctx, fault, 2*r.Profile.TTL+5*time.Second)
}
