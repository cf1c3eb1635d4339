package scenario

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// Scenario 32 (issue 11.1): a minority partition. The leader and one etcd
// member (a follower, so that no etcd leader change mixes in) are cut from
// the other two members and from the other master, which still reaches the
// cut member. The other master must take over while the partition lasts
// (it lasts 2 TTLs + 2 s), as fast as after a rack cut: requests that
// decide or observe leadership must not wait on a member without a leader.
func minorityPartition(ctx context.Context, r *Run) error {
	lead, err := r.etcdLeader(ctx)
	if err != nil {
		return err
	}
	var cut string
	var majority []string
	for _, m := range lab.EtcdNames {
		if m != lead && cut == "" {
			cut = m
		} else {
			majority = append(majority, m)
		}
	}
	hold := 2*r.Profile.TTL + 2*time.Second
	topo := r.Lab.Topo
	fault, err := r.Fault(fmt.Sprintf("cut %s and etcd member %s from %v and from %s (%s still reaches %s)", r.Leader, cut, majority, r.Standby, r.Standby, cut), func() error {
		if err := topo.Cut(ctx, []string{r.Leader, cut}, majority); err != nil {
			return err
		}
		return topo.Cut(ctx, []string{r.Leader}, []string{r.Standby})
	})
	if err != nil {
		return err
	}
	r.Notef("minority: %s + %s; majority: %v + %s; partition held %s", r.Leader, cut, majority, r.Standby, hold)
	waitCtx, cancel := context.WithDeadline(ctx, fault.Add(hold))
	_, ferr := r.Failover(waitCtx, fault, r.Standby)
	cancel()
	if ferr != nil {
		r.Failf("no failover while the partition lasted (%s): %v", hold, ferr)
		_ = Sleep(ctx, time.Until(fault.Add(hold)))
		if err := r.Heal(ctx); err != nil {
			return err
		}
		// Measure when it did happen, for the record.
		if nl, err := r.Failover(ctx, fault, lab.MasterNames...); err == nil {
			r.Notef("%s took over only after the heal (%s after the fault)", nl, time.Since(fault).Round(time.Millisecond))
		}
		return nil
	}
	r.expectStoppedBeforeWin()
	// About as fast as a rack cut (the lease runs out): a TTL plus the
	// election and a start, with a generous allowance for the machine.
	r.failoverWithin(r.Profile.TTL+r.Profile.RequestTimeout+2*time.Second, "a rack cut takes about one TTL")
	if rest := time.Until(fault.Add(hold)); rest > 0 {
		if err := Sleep(ctx, rest); err != nil {
			return err
		}
	}
	// Nothing may flap back while the partition still holds: every
	// holder after the fault is the other master (or nobody).
	for _, ch := range r.Obs.LeaderChanges(fault, time.Now()) {
		if !slices.Contains([]string{"", r.Standby}, *ch.Leader) {
			r.Failf("%s won during the partition", *ch.Leader)
		}
	}
	return r.Heal(ctx)
}
