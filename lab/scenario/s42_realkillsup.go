package scenario

import (
	"context"
	"fmt"
	"strconv"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 42 (real plane): the leader's supervisor dies of SIGKILL. Its
// units are bound to it (the drop-in's BindsTo=), so systemd stops them at
// once; systemd restarts the supervisor (Restart=always), which finds its
// lease still held and the other master waiting for it to lapse.
//
// Leader election has no supervisor: its counterpart is the loss of
// everything that leads on that master, kill -9 of both leading
// components' main processes (systemd restarts them with new identities,
// which must wait out the dead ones' Leases, as the other master's do).
// Scenario 43 kills the scheduler alone; here the controller-manager,
// which releases nothing either way, goes too.
func init() {
	registerReal(plane.Spec{ID: 42, Name: "real: leader's supervisor killed (SIGKILL)",
		Fault: "kill -9 of kha-supervisor's main process on the leader (leader election: kill -9 of both leading components there)",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			units := []string{lab.SupervisorUnit}
			if t.Mode.LeaderElect {
				units = plane.Units
			}
			n := t.Node()
			var pids []string
			for _, u := range units {
				pid, err := n.MainPID(ctx, u)
				if err != nil {
					return nil, err
				}
				if pid <= 0 {
					return nil, fmt.Errorf("%s does not run on %s", u, t.Leader)
				}
				pids = append(pids, strconv.Itoa(pid))
			}
			// A supervisor that systemd did not restart is started again
			// after the trial (nothing when it runs).
			heal := func(ctx context.Context) error {
				if t.Mode.LeaderElect {
					return nil
				}
				_, err := n.Systemctl(ctx, "start", lab.SupervisorUnit)
				return err
			}
			_, err := n.Exec(ctx, append([]string{"kill", "-9"}, pids...)...)
			return heal, err
		}})
}
