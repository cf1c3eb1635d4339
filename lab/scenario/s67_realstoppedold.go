package scenario

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Scenario 67 (real plane, issue 22 item 2): the leader's supervisor and
// both its components stopped with one SIGSTOP during a burst of creates
// (scenario 60's ReplicaSet), kept stopped across the other master's
// takeover, then resumed with SIGCONT; the apiservers and the rest of
// the master run on. Whatever systemd does meanwhile (the supervisor's
// watchdog, BindsTo= on the components; systemd sends SIGCONT after its
// kill signals) and whatever the resumed processes send is judged at etcd
// (late commits) and at the audit logs (writes accepted after the
// resume).
func init() {
	s := &burstTrial{}
	registerReal(plane.Spec{ID: 67, Name: "real: leader's supervisor and components SIGSTOPped during a burst, resumed after the takeover",
		Fault:   fmt.Sprintf("a ReplicaSet scaled 0 -> %d, %s later SIGSTOP of kha-supervisor, kube-controller-manager and kube-scheduler on the leader, SIGCONT after the takeover", burstPods, burstLead),
		Prepare: s.prepare,
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			n := t.Node()
			units := append([]string{lab.SupervisorUnit}, plane.Units...)
			if t.Mode.LeaderElect {
				units = plane.Units
			}
			pids, err := mainPIDs(ctx, n, units)
			if err != nil {
				return nil, err
			}
			if err := t.R.AnyFrom(ctx, t.Leader, func(ctx context.Context, c kubernetes.Interface) error { return scaleBurst(ctx, c, burstPods) }); err != nil {
				return nil, fmt.Errorf("scale the burst: %w", err)
			}
			time.Sleep(burstLead)
			t.Mark("frozen")
			if _, err := n.Exec(ctx, append([]string{"kill", "-STOP"}, pids...)...); err != nil {
				return nil, err
			}
			t.Mark("frozen_done")
			return func(ctx context.Context) error {
				t.Mark("thaw")
				// Gone already (killed by systemd) is fine: one at a time.
				alive := 0
				for _, p := range pids {
					if _, code := n.Run(ctx, "kill", "-CONT", p); code == 0 {
						alive++
					}
				}
				t.Mark("thawed")
				t.Notef("%d of %d stopped processes still there at the SIGCONT", alive, len(pids))
				if t.Mode.LeaderElect {
					return nil
				}
				_, err := n.Systemctl(ctx, "start", lab.SupervisorUnit)
				return err
			}, nil
		},
		Judge: func(t *plane.Trial, evs []audit.Event, res *report.Result) { judgeThawed(t, evs, res) }})
}

// mainPIDs are the units' main processes on n, waiting up to 20 s for a
// unit still starting (seen: the controller-manager without a main PID at
// the fault, its start retried after systemd's status=219/CGROUP).
func mainPIDs(ctx context.Context, n *master.Node, units []string) ([]string, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		var pids []string
		var missing error
		for _, u := range units {
			pid, err := n.MainPID(ctx, u)
			if err != nil {
				return nil, err
			}
			if pid <= 0 {
				missing = fmt.Errorf("%s does not run on %s", u, n.Name)
				break
			}
			pids = append(pids, strconv.Itoa(pid))
		}
		if missing == nil {
			return pids, nil
		}
		if time.Now().After(deadline) {
			return nil, missing
		}
		time.Sleep(500 * time.Millisecond)
	}
}
