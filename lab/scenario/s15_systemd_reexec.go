package scenario

import (
	"context"
	"strings"
	"time"
)

func systemdReexec(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	pid, err := r.SupervisorPID(ctx, r.Leader)
	if err != nil {
		return err
	}
	fault, err := r.Fault("systemctl daemon-reexec on "+r.Leader, func() error {
		_, err := n.Systemctl(ctx, "daemon-reexec")
		return err
	})
	if err != nil {
		return err
	}
	if err := Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	r.Mark(time.Now(), r.Leader, "dbus restart")
	if out, code := n.Run(ctx, "systemctl", "restart", "dbus.service"); code != 0 {
		r.Notef("dbus restart refused (exit %d): %s", code, strings.TrimSpace(out))
	}
	if err := Sleep(ctx, r.Profile.TTL+2*time.Second); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	now, err := r.SupervisorPID(ctx, r.Leader)
	if err != nil {
		return err
	}
	if now != pid {
		r.Failf("kha-supervisor on %s restarted (PID %d -> %d): a spurious fence or crash", r.Leader, pid, now)
	}
	return nil
}
