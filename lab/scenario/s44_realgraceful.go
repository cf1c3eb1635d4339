package scenario

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 44 (real plane): graceful stop of the leader. Under
// kha-supervisor its supervisor is stopped (it stops the units, releases the
// lease, the standby starts them); with leader election the leading
// master's components are stopped (the scheduler releases its lease, the
// controller-manager does not).
func init() {
	registerReal(plane.Spec{ID: 44, Name: "real: graceful stop of the leader",
		Fault: "systemctl stop kha-supervisor on the leader (leader election: stop both components there)",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			units := []string{lab.SupervisorUnit}
			if t.Mode.LeaderElect {
				units = plane.Units
			}
			n := t.Node()
			heal := func(ctx context.Context) error {
				_, err := n.Systemctl(ctx, append([]string{"start"}, units...)...)
				return err
			}
			_, err := n.Systemctl(ctx, append([]string{"stop"}, units...)...)
			return heal, err
		}})
}
