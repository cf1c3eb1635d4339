package scenario

import (
	"context"
	"fmt"
	"maps"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

func keyDeleted(ctx context.Context, r *Run) error {
	fault, err := r.Fault("delete the election key (held by "+r.Leader+")", func() error {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := r.Cli.Delete(dctx, r.Keys.Leader())
		return err
	})
	if err != nil {
		return err
	}
	// Normally the standby, campaigning all along, wins at once; the old
	// leader, restarted after fencing, may win too if the standby was not
	// campaigning at that instant. Either way the barrier must hold.
	newLeader, err := r.Failover(ctx, fault, lab.MasterNames...)
	if err != nil {
		return err
	}
	if newLeader == r.Leader {
		r.Notef("the old leader %s won again after fencing and restarting", newLeader)
	}
	// Here the margin may be negative by design: the key vanished under a
	// running leader, so the other node may win before the old units are
	// down; the promotion barrier, not the lease, keeps them apart.
	r.barrier(fault, r.Leader, newLeader, "")

	// Second half: the new leader's election lease revoked by hand.
	old := newLeader
	_, _, err = r.Steady(ctx, r.steadyTimeout())
	if err != nil {
		return err
	}
	r.Leader, r.Standby, r.LeaderToken = old, Other(old), r.Obs.Now().Token
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	resp, err := r.Cli.Get(gctx, r.Keys.Leader())
	cancel()
	if err != nil || len(resp.Kvs) != 1 {
		return fmt.Errorf("read the election key: %v", err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	saved := maps.Clone(r.Res.Metrics)
	fault2, err := r.Fault(fmt.Sprintf("revoke the election lease %x (held by %s)", lease, old), func() error {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := r.Cli.Revoke(rctx, lease)
		return err
	})
	if err != nil {
		return err
	}
	r.Res.FaultAt = fault
	back, err := r.Failover(ctx, fault2, lab.MasterNames...)
	if err != nil {
		return err
	}
	// The row's standard metrics are the deletion's; the revocation's go
	// under their own names.
	second := maps.Clone(r.Res.Metrics)
	for _, k := range []string{report.MStopped, report.MWon, report.MFailover, report.MMargin, report.MGap} {
		delete(r.Res.Metrics, k)
		if v, ok := second[k]; ok {
			r.Res.Metrics["revoke_"+k] = v
		}
		if v, ok := saved[k]; ok {
			r.Res.Metrics[k] = v
		}
	}
	r.barrier(fault2, old, back, "revoke_")
	r.Res.NewLeader = newLeader
	return nil
}

// barrier records how long after the old leader's last heartbeat the new
// leader's first unit started: the promotion barrier makes it positive even
// though the new leader won the key while the old units still ran.
func (r *Run) barrier(fault time.Time, old, new, prefix string) {
	_ = r.W.Refresh()
	var oldLast, newFirst time.Time
	for _, u := range Units() {
		// The old leader's instance that was running at the fault (the
		// same node may run a new one later, after winning again).
		if in, ok := r.W.InstanceAt(old, u, fault); ok && in.Last.After(oldLast) {
			oldLast = in.Last
		}
		if t, ok := r.W.FirstStart(new, u, fault); ok && (newFirst.IsZero() || t.Before(newFirst)) {
			newFirst = t
		}
	}
	if oldLast.IsZero() || newFirst.IsZero() {
		r.Failf("%sbarrier not measurable", prefix)
		return
	}
	r.Metric(prefix+"barrier", newFirst.Sub(oldLast))
	if !newFirst.After(oldLast) {
		r.Failf("%s started a unit %.1f ms before %s's last heartbeat", new, float64(oldLast.Sub(newFirst).Microseconds())/1000, old)
	}
}
