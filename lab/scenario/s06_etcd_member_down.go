package scenario

import (
	"context"
	"time"
)

func etcdMemberDown(ctx context.Context, r *Run) error {
	victim, err := r.etcdLeader(ctx)
	if err != nil {
		return err
	}
	fault, err := r.Fault("kill -9 of etcd member "+victim+" (raft leader)", func() error {
		return r.Lab.Etcd.Kill(ctx, victim)
	})
	if err != nil {
		return err
	}
	r.Notef("killed etcd member %s, the raft leader", victim)
	if err := Sleep(ctx, 2*r.Profile.TTL); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	if err := r.Lab.Etcd.Start(victim); err != nil {
		return err
	}
	r.Mark(time.Now(), "", "etcd member "+victim+" restarted")
	return nil
}
