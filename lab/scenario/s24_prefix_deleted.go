package scenario

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// Scenario 24 (issue 13.1): `etcdctl del --prefix` of the group's whole
// prefix (election key, every record, control, history) while a leader
// runs. The lab issues the same range delete through its own client (no
// etcdctl in the lab's namespaces). Old main: the barrier sees no record,
// and records written under LeaseValue are never re-created (stranded).
func prefixDeleted(ctx context.Context, r *Run) error {
	if err := r.ignoreTerm(ctx, r.Leader); err != nil {
		return err
	}
	prefix := r.Keys.Root + "/"
	var deleted int64
	fault, err := r.Fault("del --prefix "+prefix, func() error {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		resp, err := r.Cli.Delete(dctx, prefix, clientv3.WithPrefix())
		if err == nil {
			deleted = resp.Deleted
		}
		return err
	})
	if err != nil {
		return err
	}
	r.Notef("deleted %d keys under %s", deleted, prefix)
	newLeader, err := r.Failover(ctx, fault, lab.MasterNames...)
	if err != nil {
		// A stranded member holds the key without running anything:
		// record it, then repair the lab (recordsBack restarts it).
		r.Failf("%v", err)
		return r.recordsBack(ctx, fault, time.Second)
	}
	r.barrier(fault, r.Leader, newLeader, "")
	return r.recordsBack(ctx, fault, 2*r.Profile.TTL+5*time.Second)
}
