package scenario

import (
	"context"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/witness"
)

func quorumLost(ctx context.Context, r *Run) error {
	lead, err := r.etcdLeader(ctx)
	if err != nil {
		return err
	}
	victims := []string{lead}
	for _, m := range lab.EtcdNames {
		if m != lead && len(victims) < 2 {
			victims = append(victims, m)
		}
	}
	fault, err := r.Fault("kill -9 of etcd members "+strings.Join(victims, ", "), func() error {
		for _, v := range victims {
			if err := r.Lab.Etcd.Kill(ctx, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The leader cannot renew: it must stop its units on its own.
	err = WaitFor(ctx, r.failoverTimeout(), "leader fences", func() (bool, string) {
		t := r.refreshNow()
		return !r.AnyRunning(r.Leader, t), "units still beating on " + r.Leader
	})
	if err != nil {
		return err
	}
	var oldLast time.Time
	for _, u := range Units() {
		if t, ok := r.W.LastBeat(r.Leader, u, time.Now()); ok && t.After(oldLast) {
			oldLast = t
		}
	}
	r.Metric(report.MStopped, oldLast.Sub(fault))
	r.Mark(oldLast, r.Leader, "last heartbeat of "+r.Leader+"'s units")
	// Stay without quorum past the lease TTL: nobody may start anything.
	if err := Sleep(ctx, time.Until(fault.Add(r.Profile.TTL+3*time.Second))); err != nil {
		return err
	}
	restore := time.Now()
	_ = r.W.Refresh()
	for _, n := range lab.MasterNames {
		for _, u := range Units() {
			if ins := r.W.InstancesBetween(n, u, oldLast.Add(witness.Grace), restore); len(ins) > 0 {
				r.Failf("%s ran on %s while etcd had no quorum", u, n)
			}
		}
	}
	r.Mark(restore, "", "etcd members restarted")
	for _, v := range victims {
		if err := r.Lab.Etcd.Start(v); err != nil {
			return err
		}
	}
	newLeader, err := r.Failover(ctx, fault, lab.MasterNames...)
	if err != nil {
		return err
	}
	var first time.Time
	for _, u := range Units() {
		if t, ok := r.W.FirstStart(newLeader, u, restore); ok && t.After(first) {
			first = t
		}
	}
	if !first.IsZero() {
		r.Metric("recover", first.Sub(restore))
	}
	r.Notef("quorum lost for %s; %s took over after restore", restore.Sub(fault).Round(time.Millisecond), newLeader)
	r.expectStoppedBeforeWin()
	return nil
}
