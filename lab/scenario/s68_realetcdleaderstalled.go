package scenario

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 68 (real plane, issue 22 item 4): the etcd member that is raft
// leader stalled with SIGSTOP (a long fsync or GC pause, the process alive
// and its connections open) for the trial's hold, then resumed. The other
// members elect a new leader within about two election timeouts (stock:
// 1 s each); the supervisors' renewals go to every member at once, so the
// leader's lease rides it out (docs/architecture.md, item 5) and neither
// the units nor the components' Leases should move. The stalled member's
// queued proposals reach the new leader only after the resume: the judge
// at etcd sees whether any of the old term's writes lands late.
func init() {
	registerReal(plane.Spec{ID: 68, Layout: lab.LayoutSeparate, Name: "real: etcd raft leader stalled (SIGSTOP)",
		Fault: "SIGSTOP of the etcd member that is raft leader, SIGCONT after the service was seen working",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			e := t.R.P.Lab.Etcd
			victim, err := t.R.P.EtcdLeader(ctx)
			if err != nil {
				return nil, err
			}
			t.Notef("stalled etcd member %s (raft leader)", victim)
			heal := func(ctx context.Context) error {
				if err := e.Resume(victim); err != nil {
					return err
				}
				return e.WaitHealthy(ctx, e.Members...)
			}
			return heal, e.Pause(victim)
		}})
}
