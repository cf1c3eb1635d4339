package scenario

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// handRun is how long the hand-started scheduler competes (the prober
// creates a pod every 200 ms).
const handRun = 12 * time.Second

// Scenario 53 (real plane, issue 12): a second kube-scheduler started by
// hand on the standby, outside systemd and the supervisor, with the real
// scheduler kubeconfig and certificate, straight at the standby's
// apiserver (no gate). Every write it attempts must be refused while the
// leader's scheduler keeps binding.
func init() {
	registerReal(plane.Spec{ID: 53, Name: "real: hand-started second scheduler on the standby",
		Fault: "kube-scheduler started by hand in the standby's namespace with the scheduler's own kubeconfig, for 12 s",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			standby := otherMaster(t.Leader)
			log, stop, err := t.R.P.HandScheduler(standby)
			if err != nil {
				return nil, err
			}
			t.Mark("hand-start")
			err = Sleep(ctx, handRun)
			t.Mark("hand-stop")
			if serr := stop(ctx); err == nil {
				err = serr
			}
			if b, rerr := os.ReadFile(log); rerr == nil {
				t.Figures("hand_log_policy_lines", float64(strings.Count(string(b), "does not carry the current fencing token")))
			}
			return nil, err
		},
		Judge: func(t *plane.Trial, evs []audit.Event, res *report.Result) {
			standby := otherMaster(t.Leader)
			from, to := t.Marks["hand-start"], t.Marks["hand-stop"]
			o := audit.Options{Masters: t.R.P.MasterIPs()}
			acc, ref, leaderBinds := 0, 0, 0
			for _, e := range evs {
				if e.Received.Before(from) || e.Received.After(to.Add(time.Second)) || !audit.Managed(e) || !e.Write() || e.DryRun {
					continue
				}
				switch m := o.Master(e); {
				case m == standby && e.Accepted():
					acc++
				case m == standby && audit.PolicyRefusal(e):
					ref++
				case m == t.Leader && e.Accepted() && e.Resource == "pods" && e.Subresource == "binding":
					leaderBinds++
				}
			}
			res.Figures.Values["hand_accepted"], res.Figures.Values["hand_refused"], res.Figures.Values["leader_binds_meanwhile"] = float64(acc), float64(ref), float64(leaderBinds)
			if acc > 0 || ref == 0 || leaderBinds == 0 {
				res.Problems = append(res.Problems, fmt.Sprintf("hand-started scheduler on %s: %d writes accepted, %d refused by the policy; the leader %s bound %d pods meanwhile; want 0, > 0, > 0",
					standby, acc, ref, t.Leader, leaderBinds))
			}
		}})
}

func otherMaster(m string) string {
	if m == "m1" {
		return "m2"
	}
	return "m1"
}
