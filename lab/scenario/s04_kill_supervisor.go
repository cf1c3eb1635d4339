package scenario

import (
	"context"
)

func killSupervisor(ctx context.Context, r *Run) error {
	var pid int
	fault, err := r.Fault("kill -9 of kha-supervisor on "+r.Leader, func() error {
		var err error
		pid, err = r.Signal(ctx, r.Leader, "KILL")
		return err
	})
	if err != nil {
		return err
	}
	r.Notef("killed PID %d on %s", pid, r.Leader)
	// Either node may win: systemd restarts the killed supervisor after 1 s
	// and it campaigns like the other.
	if _, err := r.Failover(ctx, fault, r.Leader, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	return nil
}
