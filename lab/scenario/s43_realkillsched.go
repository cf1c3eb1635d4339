package scenario

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 43 (real plane): kill -9 of kube-scheduler on the leader. Under
// kha-supervisor systemd restarts it in place (Restart=on-failure); with
// leader election its lease must expire first.
func init() {
	plane.Register(plane.Scenario{ID: 43, Name: "real: scheduler killed (SIGKILL) on the leader",
		Fault: "systemctl kill -s KILL kube-scheduler on the scheduler's leader",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			_, err := t.Node().Systemctl(ctx, "kill", "-s", "KILL", "kube-scheduler.service")
			return nil, err
		}})
}
