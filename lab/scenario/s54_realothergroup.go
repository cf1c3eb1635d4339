package scenario

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// otherGroupRun is how long the misconfigured node runs in its own group:
// long enough for its promotion (and a retry after its cooldown).
const otherGroupRun = 20 * time.Second

// Scenario 54 (real plane, issue 12): the standby reconfigured into another
// group (cluster = "other" in its configuration, same etcd, same
// apiservers, same credentials): it leads its own group at once and
// starts its units. Its components' writes must be refused while the real
// group's leader keeps working.
func init() {
	registerReal(plane.Spec{ID: 54, Name: "real: a master configured into another group",
		Fault: `the standby's supervisor restarted with cluster = "other" for 20 s`,
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			standby := otherMaster(t.Leader)
			n := t.Nodes[standby]
			l, err := t.R.P.SupervisorLab(t.Mode)
			if err != nil {
				return nil, err
			}
			good := l.SupervisorConfigFor(standby)
			bad := bytes.Replace(good, []byte(fmt.Sprintf("cluster = %q", lab.Cluster)), []byte(`cluster = "other"`), 1)
			if bytes.Equal(good, bad) {
				return nil, fmt.Errorf("no cluster line in %s's configuration", standby)
			}
			heal := func(ctx context.Context) error {
				t.Mark("regrouped")
				if err := n.WriteFile(lab.SupervisorConfig, good, 0o600); err != nil {
					return err
				}
				_, err := n.Systemctl(ctx, "restart", lab.SupervisorUnit)
				return err
			}
			if err := n.WriteFile(lab.SupervisorConfig, bad, 0o600); err != nil {
				return heal, err
			}
			if _, err := n.Systemctl(ctx, "restart", lab.SupervisorUnit); err != nil {
				return heal, err
			}
			t.Mark("other-group")
			// The real leader must keep working through it: the trial's
			// resume check (a pod created after the fault bound, a deleted
			// ReplicaSet pod replaced) runs while the other group leads.
			return heal, Sleep(ctx, otherGroupRun)
		},
		Judge: func(t *plane.Trial, evs []audit.Event, res *report.Result) {
			standby := otherMaster(t.Leader)
			from, to := t.Marks["other-group"], t.Marks["regrouped"]
			o := audit.Options{Masters: t.R.P.MasterIPs()}
			acc, ref, leader := 0, 0, 0
			for _, e := range evs {
				if e.Received.Before(from) || e.Received.After(to) || !audit.Managed(e) || !e.Write() || e.DryRun {
					continue
				}
				switch m := o.Master(e); {
				case m == standby && e.Accepted():
					acc++
				case m == standby && audit.PolicyRefusal(e):
					ref++
				case m == t.Leader && e.Accepted():
					leader++
				}
			}
			// The real leader's writes in the second half: after the other
			// group's promotion had every chance to take over.
			late := 0
			for _, e := range evs {
				if e.Received.After(from.Add(otherGroupRun/2)) && !e.Received.After(to) && audit.Managed(e) && e.Write() && !e.DryRun && e.Accepted() && o.Master(e) == t.Leader {
					late++
				}
			}
			res.Figures.Values["other_group_accepted"], res.Figures.Values["other_group_refused"] = float64(acc), float64(ref)
			res.Figures.Values["leader_accepted"], res.Figures.Values["leader_accepted_late"] = float64(leader), float64(late)
			if acc > 0 || late == 0 {
				res.Problems = append(res.Problems, fmt.Sprintf("%s in another group: %d of its writes accepted (%d refused by the policy); the real leader %s had %d accepted, %d in the last %s; want 0 and > 0",
					standby, acc, ref, t.Leader, leader, late, otherGroupRun/2))
			}
		}})
}
