package scenario

import (
	"context"
	"strconv"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 49 (real plane): kube-scheduler frozen with SIGSTOP on the
// leader. systemd still reports its unit active; only kha-supervisor's
// [health] probe of its /healthz sees it: after health.failure_threshold
// failed probes in a row the unit is unhealthy and the leader restarts it
// in place (stop: systemd's SIGTERM comes with a SIGCONT, SIGKILL after
// TimeoutStopSec; then start), as it restarts a killed one (scenario 43);
// only when units.failure_threshold restarts within the window do not help
// does the other master take over. With leader election the frozen
// scheduler renews nothing: its lease expires and the other scheduler
// acquires it. The heal sends SIGCONT (the process is gone under kha; under
// leader election it wakes, finds its lease lost and exits, and systemd
// restarts it).
func init() {
	registerReal(plane.Spec{ID: 49, Name: "real: scheduler frozen (SIGSTOP) on the leader",
		Fault: "SIGSTOP of kube-scheduler's main process on the scheduler's leader (its unit stays active)",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			n := t.Node()
			pid, err := schedulerPID(ctx, t)
			if err != nil {
				return nil, err
			}
			if _, err := n.Exec(ctx, "kill", "-STOP", strconv.Itoa(pid)); err != nil {
				return nil, err
			}
			return func(ctx context.Context) error {
				// Gone already (stopped by kha-supervisor) is fine.
				_, _ = n.Exec(ctx, "kill", "-CONT", strconv.Itoa(pid))
				return nil
			}, nil
		}})
}
