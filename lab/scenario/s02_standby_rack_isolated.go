package scenario

import (
	"context"
	"time"
)

func standbyRackIsolated(ctx context.Context, r *Run) error {
	fault, err := r.Fault("cut rack of "+r.Standby+" from etcd and from "+r.Leader, func() error {
		return r.cutFromEtcd(ctx, r.Standby, r.Leader)
	})
	if err != nil {
		return err
	}
	// Long enough for anything lease-related to happen: the standby's
	// member record expires after one TTL.
	if err := Sleep(ctx, r.Profile.TTL+3*time.Second); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	if err := r.Heal(ctx); err != nil {
		return err
	}
	heal := r.Res.HealAt
	err = WaitFor(ctx, r.steadyTimeout(), "standby rejoins", func() (bool, string) {
		rec, ok := r.Obs.Now().Records[r.Standby]
		if ok && rec.State == "standby" {
			return true, ""
		}
		return false, describe(rec, ok)
	})
	if err != nil {
		return err
	}
	for _, ev := range r.Obs.Events(heal, time.Now()) {
		if ev.Record != nil && ev.Record.Node == r.Standby {
			r.Metric("rejoin", ev.At.Sub(heal))
			r.Mark(ev.At, r.Standby, r.Standby+" publishes its record again")
			break
		}
	}
	return nil
}
