package scenario

import (
	"context"
	"time"
)

// Scenario 38 (issue 11.2b): the etcd raft leader stalls for 3 s (SIGSTOP,
// as a long fsync or a GC pause would), with stock etcd timing (1 s
// election timeout). The followers elect a new leader and etcd extends every
// lease; a healthy supervisor leader must ride it out in either profile:
// its renewals resume through the new etcd leader inside its fence window
// (docs/configuration.md, "Profiles", has the arithmetic). The fast profile
// of TTL 4 s fenced and failed over here.
func etcdLeaderStalled(ctx context.Context, r *Run) error {
	victim, err := r.etcdLeader(ctx)
	if err != nil {
		return err
	}
	const stall = 3 * time.Second
	fault, err := r.Fault("SIGSTOP of etcd member "+victim+" (raft leader) for 3 s", func() error {
		return r.Lab.Etcd.Pause(victim)
	})
	if err != nil {
		return err
	}
	r.Notef("stalled etcd member %s, the raft leader, for %s", victim, stall)
	serr := Sleep(ctx, stall)
	if err := r.Lab.Etcd.Resume(victim); err != nil {
		return err
	}
	r.Mark(time.Now(), "", "etcd member "+victim+" resumed")
	if serr != nil {
		return serr
	}
	if err := Sleep(ctx, r.Profile.TTL); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	return nil
}
