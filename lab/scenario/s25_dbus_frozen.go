package scenario

import (
	"context"
	"fmt"
	"time"
)

// Scenario 25 (issue 13.2): dbus-daemon frozen on the leader, then the
// leader cut off from etcd. A fence that talks to systemd through the
// message bus hangs while its watchdog pinger keeps systemd from stepping
// in; the units must still be down before the lease can lapse.
func dbusFrozenThenCut(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	pid, err := n.MainPID(ctx, "dbus.service")
	if err != nil {
		return err
	}
	if pid == 0 {
		return fmt.Errorf("%s: dbus.service has no main process", r.Leader)
	}
	frozen := time.Now()
	if err := r.freezeInNode(ctx, r.Leader, pid, "dbus-daemon"); err != nil {
		return err
	}
	r.Mark(frozen, r.Leader, fmt.Sprintf("dbus-daemon (PID %d) frozen", pid))
	// Let the supervisor's own D-Bus calls pile up behind the frozen bus.
	if err := Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd (its dbus-daemon frozen)", func() error {
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	r.expectDownBeforeLapse(r.Leader, fault)
	r.Notef("%s's supervisor: %s", r.Leader, linesWith(r.JournalSince(ctx, r.Leader, "kha-supervisor.service", fault), "fenc", 3))
	return r.Heal(ctx)
}
