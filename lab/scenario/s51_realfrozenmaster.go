package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Scenario 51 (real plane, issue 12): the leader's whole master frozen
// with the cgroup freezer (every process of its container at once, as a VM
// pause) until the standby has taken over (longer than the TTL), then
// thawed: its supervisor and its units resume at the same instant. Judged
// at the resource: what the apiservers accepted from the frozen master's
// components after the thaw. With the fence off that is whatever they send
// before the supervisor stops them; with token mode nothing (the gate is
// closed and the parameter holds the new term's token).
func init() {
	registerReal(plane.Spec{ID: 51, Name: "real: whole leader master frozen (VM pause), thawed after the takeover",
		Fault: "cgroup freezer on every process of the leader's container for longer than the TTL",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			thaw, err := t.R.P.Freeze(t.Node())
			if err != nil {
				return nil, err
			}
			t.Mark("frozen")
			// Thawed by the trial after the standby resumed the service and
			// the settle time: the frozen span exceeds the TTL.
			return func(context.Context) error {
				err := thaw()
				t.Mark("thawed")
				return err
			}, nil
		},
		Judge: func(t *plane.Trial, evs []audit.Event, res *report.Result) {
			thawed, ok := t.Marks["thawed"]
			if !ok {
				res.Problems = append(res.Problems, "never thawed")
				return
			}
			res.Figures.Values["frozen_ms"] = float64(thawed.Sub(t.Marks["frozen"]).Milliseconds())
			o := audit.Options{Masters: t.R.P.MasterIPs()}
			acc, ref := audit.Since(evs, o, t.Leader, thawed)
			res.Figures.Values["accepted_after_thaw"], res.Figures.Values["refused_after_thaw"] = float64(acc), float64(ref)
			last := audit.LastAccepted(evs, o, t.Leader, thawed)
			if !last.IsZero() {
				res.Figures.Values["last_accepted_after_thaw_ms"] = float64(last.Sub(thawed).Milliseconds())
			}
			note := fmt.Sprintf("frozen %s; after the thaw the apiservers accepted %d and the policy refused %d managed writes from %s",
				thawed.Sub(t.Marks["frozen"]).Round(time.Millisecond), acc, ref, t.Leader)
			res.Notes = append(res.Notes, note)
			if t.Mode.Fence == plane.FenceToken && acc > 0 {
				res.Problems = append(res.Problems, note+": want none with token mode")
			}
		}})
}
