package scenario

import (
	"context"
	"fmt"
	"strconv"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 43 (real plane): kill -9 of kube-scheduler on the leader. Under
// kha-supervisor systemd restarts it in place (Restart=on-failure); with
// leader election its lease must expire first. The main process is killed
// by PID (`systemctl kill` fails on this VM's cgroups: "Failed to send
// signal SIGKILL to auxiliary processes: Input/output error").
func init() {
	registerReal(plane.Spec{ID: 43, Name: "real: scheduler killed (SIGKILL) on the leader",
		Fault: "kill -9 of kube-scheduler's main process on the scheduler's leader",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			pid, err := schedulerPID(ctx, t)
			if err != nil {
				return nil, err
			}
			_, err = t.Node().Exec(ctx, "kill", "-9", strconv.Itoa(pid))
			return nil, err
		}})
}

// schedulerPID is kube-scheduler's main process on the trial's leader.
func schedulerPID(ctx context.Context, t *plane.Trial) (int, error) {
	pid, err := t.Node().MainPID(ctx, "kube-scheduler.service")
	if err == nil && pid <= 0 {
		err = fmt.Errorf("kube-scheduler does not run on %s", t.Leader)
	}
	return pid, err
}
