package scenario

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// Scenario 26 (issue 13.2a): PID 1 of the leader's container frozen, then
// the leader cut off from etcd. Neither a stop job nor BindsTo= nor the
// watchdog can act while systemd is frozen: only the supervisor killing the
// units' processes from their cgroups keeps them from outliving the lease.
//
// The container's systemd is frozen from the host (SIGSTOP cannot be
// caught, and the host is in an ancestor PID namespace); nspawn itself only
// waits for it. It is thawed once the other node has taken over (or the
// failover wait ended), so an overlap shows in full and the lab recovers.
func pid1FrozenThenCut(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	pid1 := n.Leader
	if err := syscall.Kill(pid1, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("freeze PID 1 of %s (host PID %d): %w", r.Leader, pid1, err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(pid1, syscall.SIGCONT)
			r.Mark(time.Now(), r.Leader, "PID 1 thawed")
		}
	}
	r.Undo(func(context.Context) error { thaw(); return nil })
	r.Mark(time.Now(), r.Leader, fmt.Sprintf("PID 1 (host PID %d) frozen", pid1))
	if err := Sleep(ctx, time.Second); err != nil {
		return err
	}
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd (its PID 1 frozen)", func() error {
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	_, ferr := r.Failover(ctx, fault, r.Standby)
	// Long enough to see whether the old units outlive the takeover.
	_ = Sleep(ctx, 2*time.Second)
	thaw()
	if ferr != nil {
		return ferr
	}
	r.expectStoppedBeforeWin()
	r.expectDownBeforeLapse(r.Leader, fault)
	return r.Heal(ctx)
}
